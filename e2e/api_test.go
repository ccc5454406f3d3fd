package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rtserver/rtserver/internal/leakcheck"
	"github.com/rtserver/rtserver/internal/redistest"
	"github.com/rtserver/rtserver/internal/testkit"
	"github.com/rtserver/rtserver/internal/wstest"
)

const (
	apiKey    = "e2e-api-key"
	apiSecret = "e2e-jwt-secret"
)

// apiConfig turns on the server API and JWT authentication.
var apiConfig = fmt.Sprintf("api: {key: %q}\nauth: {jwt: {hmacSecret: %q}}\n", apiKey, apiSecret)

type apiAnswer struct {
	Status int
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// api calls POST base/api/method with the key given (none when key is "").
func api(t *testing.T, base, method, key, body string) apiAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/api/"+method, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "apikey "+key)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := apiAnswer{Status: resp.StatusCode}
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%s: answer %q is not JSON", method, b)
	}
	return a
}

func apiOK(t *testing.T, base, method, body string) json.RawMessage {
	t.Helper()
	a := api(t, base, method, apiKey, body)
	if a.Status != 200 || a.Error != nil {
		t.Fatalf("%s %s: %d %+v", method, body, a.Status, a.Error)
	}
	return a.Result
}

func dialUser(t *testing.T, p *proc, user string) *wstest.Conn {
	return wstest.Dial(t, p.WS()+"?token="+wstest.HS256(apiSecret, user))
}

// nothingBefore proves c received nothing before the answer to a request
// it sends now.
func nothingBefore(t *testing.T, c *wstest.Conn, who string) {
	t.Helper()
	c.Send(`{"jsonrpc":"2.0","id":"fence","method":"unsubscribe","params":{"topic":"fence"}}`)
	if f := c.Recv(); string(f.ID) != `"fence"` {
		t.Fatalf("%s received %+v before its fence", who, f)
	}
}

func expectUnsubscribed(t *testing.T, c *wstest.Conn, topic string) {
	t.Helper()
	if f := c.Recv(); f.Method != "system" || f.Params.Event != "unsubscribed" || f.Params.Topic != topic {
		t.Fatalf("got %+v, want the unsubscribed event for %s", f, topic)
	}
}

// Every API method through the binary, then every error status, counted
// in api_requests_total.
func TestServerAPIMethods(t *testing.T) {
	leakcheck.Check(t)
	p := start(t, apiConfig)
	base := "http://" + p.Addr
	alice, bob := dialUser(t, p, "alice"), dialUser(t, p, "bob")
	for _, c := range []*wstest.Conn{alice, bob} {
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"news"}`))
		wstest.MustOK(t, c.Call("subscribe", `{"topic":"alerts"}`))
	}

	info := apiOK(t, base, "info", `{}`)
	var in struct {
		InstanceID                     string
		Connections, Topics, Instances int
	}
	if err := json.Unmarshal(info, &in); err != nil || in.InstanceID == "" || in.Connections != 2 || in.Topics != 2 || in.Instances != 1 {
		t.Fatalf("info = %s", info)
	}

	apiOK(t, base, "publish", `{"topic":"news","data":{"headline": "hi"}}`)
	for _, c := range []*wstest.Conn{alice, bob} {
		if got := c.ExpectMessage("news"); got != `{"headline":"hi"}` {
			t.Fatalf("publish delivered %s", got)
		}
	}
	apiOK(t, base, "broadcast", `{"topics":["news","alerts"],"data":7}`)
	for _, c := range []*wstest.Conn{alice, bob} {
		if c.ExpectMessage("news") != "7" || c.ExpectMessage("alerts") != "7" {
			t.Fatal("broadcast not delivered to both topics")
		}
	}

	apiOK(t, base, "unsubscribe", `{"user":"alice","topic":"news"}`)
	expectUnsubscribed(t, alice, "news")
	apiOK(t, base, "publish", `{"topic":"news","data":"after"}`)
	if got := bob.ExpectMessage("news"); got != `"after"` {
		t.Fatalf("bob got %s", got)
	}
	nothingBefore(t, alice, "alice after unsubscribe")

	apiOK(t, base, "disconnect", `{"user":"alice"}`)
	if code, reason := alice.CloseStatus(); code != websocket.StatusPolicyViolation || reason != "disconnected" {
		t.Fatalf("alice closed with %d %q, want 1008 disconnected", code, reason)
	}
	wstest.MustOK(t, bob.Call("subscribe", `{"topic":"still"}`))

	// Every error status, with its JSON-RPC code.
	big := `{"topic":"news","data":"` + strings.Repeat("x", 70000) + `"}`
	for _, tt := range []struct {
		name, method, key, body string
		status, code            int
	}{
		{"no key", "publish", "", `{"topic":"news","data":1}`, 401, -32003},
		{"wrong key", "publish", "wrong", `{"topic":"news","data":1}`, 401, -32003},
		{"unknown method", "frobnicate", apiKey, `{}`, 404, -32601},
		{"not JSON", "publish", apiKey, `{"topic":`, 400, -32700},
		{"not an object", "publish", apiKey, `["news"]`, 400, -32600},
		{"bad topic", "publish", apiKey, `{"topic":"no spaces","data":1}`, 400, -32602},
		{"reserved topic", "publish", apiKey, `{"topic":"__x","data":1}`, 400, -32602},
		{"missing user", "disconnect", apiKey, `{}`, 400, -32602},
		{"oversize", "publish", apiKey, big, 413, -32004},
	} {
		a := api(t, base, tt.method, tt.key, tt.body)
		if a.Status != tt.status || a.Error == nil || a.Error.Code != tt.code {
			t.Errorf("%s: %d %+v, want %d %d", tt.name, a.Status, a.Error, tt.status, tt.code)
		}
	}
	// Nothing else was disturbed.
	apiOK(t, base, "publish", `{"topic":"news","data":"still fine"}`)
	if got := bob.ExpectMessage("news"); got != `"still fine"` {
		t.Fatalf("bob got %s", got)
	}
	for series, want := range map[string]float64{
		`api_requests_total{code="200",method="publish"}`:    3,
		`api_requests_total{code="200",method="info"}`:       1,
		`api_requests_total{code="401",method="publish"}`:    2,
		`api_requests_total{code="404",method="unknown"}`:    1,
		`api_requests_total{code="400",method="publish"}`:    4,
		`api_requests_total{code="400",method="disconnect"}`: 1,
		`api_requests_total{code="413",method="publish"}`:    1,
	} {
		if got := p.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	// 503 while draining (a client keeps the drain going).
	p.signal(syscall.SIGTERM)
	testkit.Eventually(t, 10*time.Second, "draining", func() bool { return p.status("/readyz") == 503 })
	if a := api(t, base, "publish", apiKey, `{"topic":"news","data":1}`); a.Status != 503 || a.Error == nil || a.Error.Code != -32001 {
		t.Errorf("while draining: %d %+v, want 503 -32001", a.Status, a.Error)
	}
}

// With adminListen set, the API is served there and not on the main
// listener.
func TestServerAPIOnAdminListen(t *testing.T) {
	leakcheck.Check(t)
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := start(t, apiConfig+fmt.Sprintf("adminListen: %q\n", admin))
	resp, err := httpClient.Post(p.url("/api/info"), "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("main listener /api/info: %d, want 404", resp.StatusCode)
	}
	apiOK(t, "http://"+admin, "info", `{}`)
}

// disconnect and unsubscribe issued on one instance reach the user's
// connections on another, through a real redis-server on both buses, and
// through a real 3-node Redis Cluster on the sharded bus (the user's
// control partition lives on whichever node holds it).
func TestServerAPIAcrossInstances(t *testing.T) {
	for _, tt := range []struct {
		name, bus string
		cluster   bool
	}{
		{"single", "single", false},
		{"sharded", "sharded", false},
		{"sharded-cluster", "sharded", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			leakcheck.Check(t)
			var url string
			if tt.cluster {
				url = clusterURL(redistest.StartCluster(t))
			} else {
				url = redistest.Start(t).URL()
			}
			cfg := fleetConfig(url, apiConfig)
			env := "RTSERVER_REDIS_BUS=" + tt.bus
			a, b := start(t, cfg, env), start(t, cfg, env)
			onB := []*wstest.Conn{dialUser(t, b, "alice"), dialUser(t, b, "alice")}
			bob := dialUser(t, b, "bob")
			for _, c := range append(onB, bob) {
				wstest.MustOK(t, c.Call("subscribe", `{"topic":"room"}`))
			}
			base := "http://" + a.Addr
			// The fleet is visible to info once b's rate envelope arrived.
			testkit.Eventually(t, 10*time.Second, "two instances in info", func() bool {
				return strings.Contains(string(apiOK(t, base, "info", `{}`)), `"instances":2`)
			})

			apiOK(t, base, "unsubscribe", `{"user":"alice","topic":"room"}`)
			for _, c := range onB {
				expectUnsubscribed(t, c, "room")
			}
			apiOK(t, base, "publish", `{"topic":"room","data":"x"}`)
			if got := bob.ExpectMessage("room"); got != `"x"` {
				t.Fatalf("bob got %s", got)
			}
			for _, c := range onB {
				nothingBefore(t, c, "alice after unsubscribe")
			}

			apiOK(t, base, "disconnect", `{"user":"alice"}`)
			for i, c := range onB {
				if code, reason := c.CloseStatus(); code != websocket.StatusPolicyViolation || reason != "disconnected" {
					t.Fatalf("alice[%d] on b closed with %d %q", i, code, reason)
				}
			}
			wstest.MustOK(t, bob.Call("subscribe", `{"topic":"still"}`))
		})
	}
}
