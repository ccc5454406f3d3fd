package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/conf"
)

// Loading: flags, then the file, then the environment, then flags again.
// Every key, default and rule belongs to rtserver.Config; this file only
// finds the values.

const envPrefix = "RTSERVER_"

// usageOutput receives the -h usage text; tests silence it.
var usageOutput io.Writer = os.Stderr

// Action is what the binary should do once the configuration is loaded.
type Action int

const (
	ActionRun            Action = iota // serve
	ActionPrintConfig                  // --print-config: write the YAML to stdout, exit 0
	ActionPrintReference               // --config-reference: write ConfigReference() to stdout, exit 0
	ActionPrintVersion                 // --version: write the module version to stdout, exit 0
)

// KeyError is an invalid or unknown configuration key (rtserver.ConfigError).
type KeyError = rtserver.ConfigError

// configFlags are the command-line flags, parsed before anything else
// because --config names the file.
type configFlags struct {
	fs                            *flag.FlagSet
	config                        string
	listen, adminListen, redisURL string
	logFormat, logLevel           string
	printConfig, printReference   bool
	version                       bool
}

func newConfigFlags() *configFlags {
	f := &configFlags{fs: flag.NewFlagSet("rtserver", flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(io.Discard) // errors are returned, usage is printed on -h only
	fs.StringVar(&f.config, "config", "", "YAML configuration `file`")
	fs.StringVar(&f.listen, "listen", "", "listen `address` (overrides listen)")
	fs.StringVar(&f.adminListen, "admin-listen", "", "admin listen `address` for /metrics and the server API (overrides adminListen)")
	fs.StringVar(&f.redisURL, "redis-url", "", "Redis `URL` (overrides redis.url)")
	fs.StringVar(&f.logFormat, "log-format", "", "log `format`: text | json (overrides log.format)")
	fs.StringVar(&f.logLevel, "log-level", "", "log `level`: debug | info | warn | error (overrides log.level)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration as YAML and exit")
	fs.BoolVar(&f.printReference, "config-reference", false, "print the configuration reference (Markdown) and exit")
	fs.BoolVar(&f.version, "version", false, "print the module version and exit")
	return f
}

func (f *configFlags) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: rtserver [flags]\n       rtserver SUBCOMMAND [flags] [args]\n\n%s\nConfiguration precedence: defaults < --config file < %s* environment < flags.\nSee docs/configuration.md or run rtserver --config-reference.\n\nFlags:\n", toolsUsage, envPrefix)
	f.fs.SetOutput(w)
	f.fs.PrintDefaults()
	f.fs.SetOutput(io.Discard)
}

// Load builds the configuration: rtserver.DefaultConfig(), then the YAML
// file named by --config, then RTSERVER_* variables from environ, then
// flags; and validates the result. args excludes the program name
// (os.Args[1:]); environ is os.Environ(). On -h/--help it prints usage and
// returns flag.ErrHelp (exit 0). ActionPrintReference returns before any
// file or environment is read.
func Load(args []string, environ []string) (rtserver.Config, Action, error) {
	cfg := rtserver.DefaultConfig()
	f := newConfigFlags()
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.usage(usageOutput)
			return cfg, ActionRun, flag.ErrHelp
		}
		return cfg, ActionRun, &KeyError{Key: "flags", Msg: err.Error() + " (rtserver -h lists them)"}
	}
	if f.fs.NArg() > 0 {
		return cfg, ActionRun, &KeyError{Key: "flags", Msg: fmt.Sprintf("unexpected argument %q", f.fs.Arg(0))}
	}
	if f.version {
		return cfg, ActionPrintVersion, nil
	}
	action := ActionRun
	switch {
	case f.printConfig && f.printReference:
		return cfg, ActionRun, &KeyError{Key: "flags", Msg: "--print-config and --config-reference exclude each other"}
	case f.printReference:
		return cfg, ActionPrintReference, nil
	case f.printConfig:
		action = ActionPrintConfig
	}

	// File and environment problems are reported together; validation
	// waits until both are clean, as it would only repeat them.
	var srcErr error
	if f.config != "" {
		data, err := os.ReadFile(f.config)
		if err != nil {
			return cfg, action, &KeyError{Key: "--config", Msg: err.Error()}
		}
		srcErr = conf.DecodeYAML(&cfg, data, f.config)
	}
	if err := errors.Join(srcErr, conf.ApplyEnv(&cfg, environ, envPrefix)); err != nil {
		return cfg, action, err
	}
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "listen":
			cfg.Listen = f.listen
		case "admin-listen":
			cfg.AdminListen = f.adminListen
		case "redis-url":
			cfg.Redis.URL = f.redisURL
		case "log-format":
			cfg.Log.Format = f.logFormat
		case "log-level":
			cfg.Log.Level = f.logLevel
		}
	})
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, action, err
	}
	return cfg, action, nil
}
