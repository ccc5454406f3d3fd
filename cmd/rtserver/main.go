// Command rtserver is the standalone rtserver: a WebSocket realtime server
// with two-tier admission control, configured by a YAML file, RTSERVER_*
// environment variables and flags (in that order of precedence).
//
//	rtserver                      # single instance, in-memory bus, 127.0.0.1:8080
//	rtserver --config rt.yaml     # see docs/configuration.md
//	rtserver --print-config       # the effective configuration
//	rtserver --version            # the release, e.g. "rtserver 0.1.0 (REVISION) go1.26.8"
//	rtserver token --user alice   # a token signed with auth.jwt.hmacSecret
//	rtserver checktoken TOKEN     # which check a token fails
//	rtserver sub room:1           # each message of a topic, as JSON lines
//	rtserver pub room:1 '{"a":1}' # publish
//	rtserver presence room:1      # who is subscribed, as JSON lines
//	rtserver history room:1       # the stored messages, as JSON lines
//
// SIGTERM or SIGINT drains (readiness 503, clients told and closed with
// 1012 spread over drain.duration) and exits 0; a second signal closes the
// remaining connections at once.
//
// The binary only loads the configuration (rtserver.Config holds every key,
// default and rule) and sets what is process-wide: the log, go-redis's
// logger, the Go and process collectors.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/conf"
	"github.com/rtserver/rtserver/internal/logx"
)

//go:generate go test -run ^TestConfigReferenceUpToDate$ . -update-config-reference

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if code, ok := runTool(args[0], args[1:], environ, stdout, stderr); ok {
			return code
		}
		if !strings.HasPrefix(args[0], "-") {
			fmt.Fprintf(stderr, "rtserver: unknown subcommand %q: the subcommands are %s (rtserver --help says more)\n", args[0], toolNames)
			return 2
		}
	}
	cfg, action, err := Load(args, environ)
	if errors.Is(err, flag.ErrHelp) {
		newConfigFlags().usage(stdout) // asked for: stdout, exit 0
		return 0
	}
	if err != nil {
		printConfigErrors(stderr, err)
		return 2
	}
	switch action {
	case ActionPrintConfig, ActionPrintConfigSecrets:
		if action == ActionPrintConfig {
			cfg = redactSecrets(cfg)
		}
		out, err := conf.EncodeYAML(cfg)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		stdout.Write(out)
		return 0
	case ActionPrintReference:
		stdout.Write(ConfigReference())
		return 0
	case ActionPrintVersion:
		fmt.Fprintln(stdout, "rtserver", version())
		return 0
	}

	log := cfg.Log.NewLogger(stderr)
	// go-redis writes free text to stderr, a line per failed dial during
	// an outage; route it through the structured, rate-limited log. Its
	// logger is process-wide, so only the binary sets it.
	redisLog := slog.New(logx.Limit(log.Handler(), 10*time.Second, nil))
	redis.SetLogger(logx.Printf{Logger: redisLog, Msg: "redis client"})
	// The Go and process collectors belong to the process, not to a node:
	// the binary registers them beside the node's metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: cfg.Metrics.Namespace}))
	node, err := rtserver.New(cfg, rtserver.Deps{Registry: reg, Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	// First signal: drain. Second: close what is left at once.
	if err := rtserver.RunUntilSignal(node, nil); err != nil {
		log.Error("rtserver stopped", "err", err)
		return 1
	}
	return 0
}

// printConfigErrors writes one line per configuration problem, each
// starting "config: ".
func printConfigErrors(w io.Writer, err error) {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintln(w, "config: "+line)
	}
}
