package rtserver_test

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rtserver/rtserver"
	"github.com/rtserver/rtserver/internal/testnode"
	"github.com/rtserver/rtserver/internal/wstest"
)

// BenchmarkAPIPublish measures server API publishes per second through a
// real listener, with keep-alive: net/http clients in this process (they
// share the machine's cores with the server, so the figure is a floor)
// POST /api/publish to a topic with one WebSocket subscriber, which reads
// every message. Reported as req/s. The baseline sub-benchmark POSTs the
// same body to a handler on the same listener that only reads it and
// answers {"result":{}}: what net/http and the client cost alone.
//
//	go test -run '^$' -bench BenchmarkAPIPublish -count 5 .
func BenchmarkAPIPublish(b *testing.B) {
	cfg := quietConfig()
	cfg.API.Key = "bench-key"
	_, addr := testnode.Start(b, cfg, quiet, func(node *rtserver.Node) {
		node.HandleHTTP("POST /baseline", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"result":{}}`))
		}))
	})
	base := "http://" + addr

	// One subscriber that drains everything, so each publish is really
	// delivered (encoded, queued and written to a socket).
	sub := wstest.Dial(b, "ws://"+addr+"/ws")
	wstest.MustOK(b, sub.Call("subscribe", `{"topic":"bench"}`))
	go func() {
		for {
			if _, err := sub.Read(); err != nil {
				return
			}
		}
	}()

	par := 4 // goroutines per GOMAXPROCS: enough requests in flight to keep the server busy
	tr := &http.Transport{MaxIdleConnsPerHost: par * runtime.GOMAXPROCS(0)}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := `{"topic":"bench","data":{"price":101.5,"symbol":"ABC"}}`

	b.Run("api", func(b *testing.B) { benchPOST(b, client, base+"/api/publish", body, par) })
	b.Run("baseline", func(b *testing.B) { benchPOST(b, client, base+"/baseline", body, par) })
}

// benchPOST POSTs body to url from par goroutines per GOMAXPROCS and
// reports requests per second.
func benchPOST(b *testing.B, client *http.Client, url, body string, par int) {
	b.SetParallelism(par)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			req.Header.Set("Authorization", "apikey bench-key")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}
