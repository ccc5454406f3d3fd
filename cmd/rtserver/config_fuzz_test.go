package main

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// checkKeyErrors fails unless every error in err is a *KeyError.
func checkKeyErrors(t *testing.T, err error) {
	t.Helper()
	for _, k := range errorKeys(err) {
		if strings.HasPrefix(k, "<not a KeyError") {
			t.Fatalf("an error that names no key: %s", k)
		}
	}
}

// checkRoundTrip: a loaded config prints as YAML that reloads to the same
// config (compared as YAML so NaN, which Validate refuses, compares equal).
func checkRoundTrip(t *testing.T, cfg Config) {
	t.Helper()
	y, err := cfg.YAML()
	if err != nil {
		t.Fatalf("YAML: %v", err)
	}
	again := Default()
	if err := decodeFile(&again, y, "print-config.yaml"); err != nil {
		t.Fatalf("reloading --print-config output: %v\n%s", err, y)
	}
	again.normalize()
	y2, err := again.YAML()
	if err != nil {
		t.Fatalf("YAML: %v", err)
	}
	if !bytes.Equal(y, y2) {
		t.Fatalf("round trip changed the config:\n%s\n---\n%s", y, y2)
	}
	if cfg.Validate() == nil && !reflect.DeepEqual(cfg, again) {
		t.Fatalf("round trip changed a valid config:\n got %+v\nwant %+v", again, cfg)
	}
}

// FuzzLoadYAML: arbitrary bytes as the config file never panic; they give
// either a config that survives --print-config, or KeyErrors.
func FuzzLoadYAML(f *testing.F) {
	f.Add([]byte(contractYAML))
	f.Add([]byte(""))
	f.Add([]byte("listen: :8080\nredis: {url: redis://r:6379, bus: sharded}\n"))
	f.Add([]byte("handshake:\n  maxConcurent: 5\n"))
	f.Add([]byte("handshake: {tick: 10}\n"))
	f.Add([]byte("handshake: {tick: 1s, tick: 2s}\n"))
	f.Add([]byte("admission: {classes: {a: {rate: {<<: {limit: 1, per: 1s}}}}, methods: {'*': a}}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("listen: *nope\n"))
	f.Add([]byte("- 1\n- 2\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("pressure: {memoryHeapUsedRatio: .nan, topicPublishBytesPerSec: 1e300}\n"))
	f.Add([]byte("admission: {classes: {!!binary /w==: {reasons: [MEMORY]}}}\n"))
	f.Add([]byte("log: {level: \"\\n\"}\n"))
	f.Add([]byte(laughs()))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Default()
		if err := decodeFile(&cfg, data, "fuzz.yaml"); err != nil {
			checkKeyErrors(t, err)
			return
		}
		cfg.normalize()
		checkKeyErrors(t, cfg.Validate())
		checkRoundTrip(t, cfg)
	})
}

// FuzzEnv: arbitrary values in RTSERVER_* variables never panic; they give
// either a config that survives --print-config, or KeyErrors.
func FuzzEnv(f *testing.F) {
	f.Add(uint8(0), "0.0.0.0:80", uint8(1), "")
	f.Add(uint8(9), "10ms", uint8(15), "10.0.0.0/8, fd00::/8")
	f.Add(uint8(38), "{chat: {rate: {limit: 20, per: 1s, by: user}, concurrency: {max: 8}}}", uint8(39), `{publish: chat, "report.*": chat}`)
	f.Add(uint8(38), "{a: [", uint8(39), "[x]")
	f.Add(uint8(26), "1.5", uint8(27), "-1")
	f.Add(uint8(17), "maybe", uint8(255), "x")
	f.Fuzz(func(t *testing.T, i uint8, v string, j uint8, w string) {
		env := []string{pickEnv(i) + "=" + v, pickEnv(j) + "=" + w}
		cfg := Default()
		if err := applyEnv(&cfg, env); err != nil {
			checkKeyErrors(t, err)
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("no KeyError in %v", err)
			}
			return
		}
		cfg.normalize()
		checkKeyErrors(t, cfg.Validate())
		checkRoundTrip(t, cfg)
	})
}

// pickEnv maps a byte to a known variable, or to an unknown one past the end.
func pickEnv(i uint8) string {
	if int(i) < len(configLeaves) {
		return configLeaves[i].env
	}
	return envPrefix + "NOT_A_KEY"
}
