package main

import (
	"bytes"
	"strings"
	"testing"
)

// --print-config prints no secret unless --show-secrets asks: the JWT
// key, the bus key, the API key and the Redis password all print as the
// mark, and the mark loaded back is refused rather than used as a key.
func TestPrintConfigRedactsSecrets(t *testing.T) {
	secrets := []string{"jwt-secret-1", "bus-secret-2", "api-key-3", "redis-pw-4", "sentinel-pw-5"}
	env := []string{
		"RTSERVER_AUTH_JWT_HMACSECRET=" + secrets[0],
		"RTSERVER_PUBLISHRATE_HMACSECRET=" + secrets[1],
		"RTSERVER_API_KEY=" + secrets[2],
		"RTSERVER_REDIS_URL=redis://fleet:" + secrets[3] + "@127.0.0.1:6379/0",
		"RTSERVER_REDIS_SENTINEL_ADDRS=127.0.0.1:26379",
		"RTSERVER_REDIS_SENTINEL_PASSWORD=" + secrets[4],
	}
	var out, errs bytes.Buffer
	if code := run([]string{"--print-config"}, env, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, s := range secrets {
		if strings.Contains(out.String(), s) {
			t.Errorf("--print-config printed the secret %q:\n%s", s, out.String())
		}
	}
	if n := strings.Count(out.String(), redactedMark); n != 5 {
		t.Errorf("%d redaction marks, want 5:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "redis://fleet:"+redactedMark+"@127.0.0.1:6379/0") {
		t.Errorf("the Redis URL should keep all but its password:\n%s", out.String())
	}
	// The redacted output does not start a server with the mark as keys.
	_, _, err := Load([]string{"--config", writeFile(t, out.String())}, nil)
	for _, key := range append(append([]string{}, secretKeys...), "redis.url") {
		if err == nil || !strings.Contains(err.Error(), key+": is "+redactedMark) && !strings.Contains(err.Error(), key+": has the password") {
			t.Errorf("loading the redacted output: %v, want a problem with %s", err, key)
		}
	}

	out.Reset()
	if code := run([]string{"--print-config", "--show-secrets"}, env, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, s := range secrets {
		if !strings.Contains(out.String(), s) {
			t.Errorf("--show-secrets did not print %q", s)
		}
	}
	if got, _, err := Load([]string{"--config", writeFile(t, out.String())}, nil); err != nil || string(got.Auth.JWT.HMACSecret) != secrets[0] {
		t.Errorf("--show-secrets output does not load back: %v", err)
	}
	if _, _, err := Load([]string{"--show-secrets"}, nil); err == nil {
		t.Error("--show-secrets alone accepted")
	}
	// The help says so.
	var help bytes.Buffer
	newConfigFlags().usage(&help)
	if !strings.Contains(help.String(), "--show-secrets") && !strings.Contains(help.String(), "-show-secrets") || !strings.Contains(help.String(), redactedMark) {
		t.Errorf("the help does not explain the redaction:\n%s", help.String())
	}
}
