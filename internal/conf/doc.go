// Package conf walks a configuration struct tree by its yaml tags: it
// decodes a YAML file strictly into it, applies RTSERVER_*-style
// environment variables, prints it back as YAML, and lists its keys (path,
// environment name, help text) for the generated reference. It owns the
// mechanics only: it holds no key, no default and no rule.
//
// # Adding a configuration key
//
// A key is one field in the Config struct of the package that uses it:
// give it a `yaml:"name"` tag and a `help:"..."` tag (the one-line
// description of docs/configuration.md), set its default in that package's
// DefaultConfig (and, if the zero value must mean the default for
// embedders, where the package applies defaults), and check it in that
// package's Validate, naming the key by its full path
// (conf.Problems.Add("limits.maxJSONDepth", ...)). The root
// rtserver.Config reaches every package's Config, so the YAML file, the
// RTSERVER_* variable, --print-config and the reference follow by
// themselves; regenerate docs/configuration.md with
// `go generate ./cmd/rtserver`. A Config holds only what YAML can say:
// what it cannot (loggers, metrics, clocks, callbacks, clients, the
// instance id) travels in the package's Deps, the second argument of its
// New(cfg Config, deps Deps); a clock only tests set is an unexported
// field of Deps. A bound no key sets is a named constant, or an
// unexported field its own package's tests set.
//
// Supported field types: string, bool, integers, float64, time.Duration
// (a Go duration string), []byte (as a string), types implementing
// encoding.TextMarshaler and encoding.TextUnmarshaler (as a string),
// slices of those, maps from string, nested structs (sections), pointers
// to structs, and slices of structs. `yaml:",inline"` merges a struct's
// keys into its parent; `yaml:"name,omitempty"` leaves a zero value out of
// the printed YAML.
//
// It must never import a package of this module other than internal ones:
// every package's Config depends on it, not the reverse.
package conf
