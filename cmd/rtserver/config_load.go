package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// Loading: flags, then the file, then the environment, then flags again.

const envPrefix = "RTSERVER_"

// usageOutput receives the -h usage text; tests silence it.
var usageOutput io.Writer = os.Stderr

// configFlags are the command-line flags, parsed before anything else
// because --config names the file.
type configFlags struct {
	fs                            *flag.FlagSet
	config                        string
	listen, adminListen, redisURL string
	logFormat, logLevel           string
	printConfig, printReference   bool
}

func newConfigFlags() *configFlags {
	f := &configFlags{fs: flag.NewFlagSet("rtserver", flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(io.Discard) // errors are returned, usage is printed on -h only
	fs.StringVar(&f.config, "config", "", "YAML configuration `file`")
	fs.StringVar(&f.listen, "listen", "", "listen `address` (overrides listen)")
	fs.StringVar(&f.adminListen, "admin-listen", "", "admin listen `address` for /metrics (overrides adminListen)")
	fs.StringVar(&f.redisURL, "redis-url", "", "Redis `URL` (overrides redis.url)")
	fs.StringVar(&f.logFormat, "log-format", "", "log `format`: text | json (overrides log.format)")
	fs.StringVar(&f.logLevel, "log-level", "", "log `level`: debug | info | warn | error (overrides log.level)")
	fs.BoolVar(&f.printConfig, "print-config", false, "print the effective configuration as YAML and exit")
	fs.BoolVar(&f.printReference, "config-reference", false, "print the configuration reference (Markdown) and exit")
	return f
}

func (f *configFlags) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: rtserver [flags]\n\nConfiguration precedence: defaults < --config file < %s* environment < flags.\nSee docs/configuration.md or run rtserver --config-reference.\n\nFlags:\n", envPrefix)
	f.fs.SetOutput(w)
	f.fs.PrintDefaults()
	f.fs.SetOutput(io.Discard)
}

// Load builds the configuration: Default(), then the YAML file named by
// --config, then RTSERVER_* variables from environ, then flags; and
// validates the result. args excludes the program name (os.Args[1:]);
// environ is os.Environ(). On -h/--help it prints usage to stderr and
// returns flag.ErrHelp (exit 0). ActionPrintReference returns before any
// file or environment is read.
func Load(args []string, environ []string) (Config, Action, error) {
	cfg := Default()
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
		srcErr = decodeFile(&cfg, data, f.config)
	}
	if err := errors.Join(srcErr, applyEnv(&cfg, environ)); err != nil {
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
	cfg.normalize()
	if err := cfg.Validate(); err != nil {
		return cfg, action, err
	}
	return cfg, action, nil
}

// normalize puts equal configurations into one representation: empty lists
// and maps become nil, and a class rule's empty "by" becomes its default.
// Load does this, so --print-config shows what is in effect and reloads to
// an identical Config.
func (c *Config) normalize() {
	nilIfEmpty := func(s []string) []string {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	c.Handshake.TrustedProxies = nilIfEmpty(c.Handshake.TrustedProxies)
	c.Handshake.AllowedOrigins = nilIfEmpty(c.Handshake.AllowedOrigins)
	// Grant lists: nil and empty both mean nobody.
	if len(c.Topics.Namespaces) == 0 {
		c.Topics.Namespaces = nil
	}
	for i := range c.Topics.Namespaces {
		n := &c.Topics.Namespaces[i]
		n.Subscribe, n.Publish = nilIfEmpty(n.Subscribe), nilIfEmpty(n.Publish)
	}
	c.Topics.Default.Subscribe = nilIfEmpty(c.Topics.Default.Subscribe)
	c.Topics.Default.Publish = nilIfEmpty(c.Topics.Default.Publish)
	if len(c.Admission.Classes) == 0 {
		c.Admission.Classes = nil
	}
	if len(c.Admission.Methods) == 0 {
		c.Admission.Methods = nil
	}
	for name, r := range c.Admission.Classes {
		r.Reasons = nilIfEmpty(r.Reasons)
		if r.ClusterTopPublisher != nil && r.ClusterTopPublisher.By == "" {
			ctp := *r.ClusterTopPublisher
			ctp.By = "topic"
			r.ClusterTopPublisher = &ctp
		}
		if r.Rate != nil && (r.Rate.By == "" || r.Rate.Strategy == "" || r.Rate.Scope == "") {
			rate := *r.Rate
			rate.By = cmp.Or(rate.By, "user")
			rate.Strategy = cmp.Or(rate.Strategy, "gcra")
			rate.Scope = cmp.Or(rate.Scope, "local")
			r.Rate = &rate
		}
		if r.Cost != nil && (r.Cost.By == "" || r.Cost.Scope == "") {
			cost := *r.Cost
			cost.By = cmp.Or(cost.By, "user")
			cost.Scope = cmp.Or(cost.Scope, "local")
			r.Cost = &cost
		}
		c.Admission.Classes[name] = r
	}
}
