package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/conf"
)

// Loading: flags, then the file, then the environment, then flags again.
// Every key, default and rule belongs to rtserver.Config; this file only
// finds the values.

const envPrefix = "RTSERVER_"

// Action is what the binary should do once the configuration is loaded.
type Action int

const (
	ActionRun                Action = iota // serve
	ActionPrintConfig                      // --print-config: write the YAML, secrets redacted (redactSecrets), to stdout, exit 0
	ActionPrintConfigSecrets               // --print-config --show-secrets: the YAML with secrets as they are
	ActionPrintReference                   // --config-reference: write ConfigReference() to stdout, exit 0
	ActionPrintVersion                     // --version: write the module version to stdout, exit 0
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
	showSecrets                   bool
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
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration as YAML and exit; secrets (auth.jwt.hmacSecret, publishRate.hmacSecret, api.key, redis.sentinel.password, the password of redis.url) print as "+redactedMark+" unless --show-secrets")
	fs.BoolVar(&f.showSecrets, "show-secrets", false, "with --print-config: print secrets as they are (output that loads back unchanged; treat it as secret)")
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
// (os.Args[1:]); environ is os.Environ(). On -h/--help it returns
// flag.ErrHelp: the caller prints the usage (on stdout, exit 0). ActionPrintReference returns before any
// file or environment is read.
func Load(args []string, environ []string) (rtserver.Config, Action, error) {
	cfg := rtserver.DefaultConfig()
	f := newConfigFlags()
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
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
	case f.showSecrets && !f.printConfig:
		return cfg, ActionRun, &KeyError{Key: "flags", Msg: "--show-secrets goes with --print-config"}
	case f.printConfig && f.showSecrets:
		action = ActionPrintConfigSecrets
	case f.printConfig:
		action = ActionPrintConfig
	}

	// Every problem is reported at once: a value that fails to decode
	// keeps its default, and validation runs on what did decode; its
	// problems with a key inside or around one that failed to decode are
	// left out, as they only repeat it (a class whose one rule was
	// misspelt has no rule).
	var srcErr error
	var lines map[string]int
	if f.config != "" {
		data, err := os.ReadFile(f.config)
		if err != nil {
			return cfg, action, &KeyError{Key: "--config", Msg: err.Error()}
		}
		srcErr = conf.DecodeYAML(&cfg, data, f.config)
		lines = conf.KeyLines(data)
	}
	envErr := conf.ApplyEnv(&cfg, environ, envPrefix)
	overridden := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) {
		key := ""
		switch fl.Name {
		case "listen":
			cfg.Listen, key = f.listen, "listen"
		case "admin-listen":
			cfg.AdminListen, key = f.adminListen, "adminListen"
		case "redis-url":
			cfg.Redis.URL, key = f.redisURL, "redis.url"
		case "log-format":
			cfg.Log.Format, key = f.logFormat, "log.format"
		case "log-level":
			cfg.Log.Level, key = f.logLevel, "log.level"
		}
		overridden[key] = true
	})
	cfg = cfg.WithDefaults()
	valErr := withoutEchoes(errors.Join(cfg.Validate(), redactedSecrets(cfg)), errors.Join(srcErr, envErr))
	if lines != nil && valErr != nil {
		set := map[string]bool{}
		for _, kv := range environ {
			name, _, _ := strings.Cut(kv, "=")
			set[name] = true
		}
		for _, l := range conf.Leaves(reflect.TypeOf(cfg), envPrefix) {
			if set[l.Env] {
				overridden[l.Path] = true
			}
		}
		valErr = placeInFile(valErr, f.config, lines, overridden)
	}
	return cfg, action, errors.Join(srcErr, envErr, valErr)
}

// withoutEchoes drops the problems of err about a key that contains, or
// lies inside, a key of a problem in decoded.
func withoutEchoes(err, decoded error) error {
	if err == nil || decoded == nil {
		return err
	}
	var failed []string
	for _, e := range flatten(decoded) {
		if ke, ok := errors.AsType[*KeyError](e); ok {
			failed = append(failed, ke.Key)
		}
	}
	var kept []error
	for _, e := range flatten(err) {
		ke, ok := errors.AsType[*KeyError](e)
		echo := ok && slices.ContainsFunc(failed, func(k string) bool {
			return k == ke.Key || strings.HasPrefix(k, ke.Key+".") || strings.HasPrefix(ke.Key, k+".")
		})
		if !echo {
			kept = append(kept, e)
		}
	}
	return errors.Join(kept...)
}

// flatten lists the errors an errors.Join holds (err itself otherwise).
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// placeInFile gives each validation problem of a key the file set (and
// nothing later overrode) the file's FILE:LINE, as decode errors have.
func placeInFile(err error, file string, lines map[string]int, overridden map[string]bool) error {
	errs := flatten(err)
	for _, e := range errs {
		var ke *KeyError
		if !errors.As(e, &ke) || ke.Source != "" || overridden[ke.Key] {
			continue
		}
		if line, ok := lines[ke.Key]; ok {
			ke.Source = file + ":" + strconv.Itoa(line)
		}
	}
	return errors.Join(errs...)
}
