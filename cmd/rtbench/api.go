package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// apiConfig drives the server API mode: C closed-loop callers POST Body to
// URL (e.g. http://127.0.0.1:9090/api/publish) over keep-alive
// connections for Duration.
type apiConfig struct {
	URL       *url.URL
	Key       string
	Body      string
	C         int
	Duration  time.Duration
	ServerPID int
}

type apiResult struct {
	URL      string         `json:"url"`
	C        int            `json:"callers"`
	Requests int64          `json:"requests"`
	Seconds  float64        `json:"seconds"`
	PerSec   float64        `json:"requestsPerSec"`
	Status   map[string]int `json:"status"`
	Errors   int64          `json:"transportErrors"`
	Latency  latency        `json:"latency"`
	// Server CPU (with --server-pid): what capacity the server has on a
	// machine that is not shared, whatever this run's wall-clock rate.
	ServerCPU       float64 `json:"serverCpuSeconds,omitempty"`
	CPUPerRequestUs float64 `json:"serverCpuPerRequestUs,omitempty"`
	PerCPUSecond    float64 `json:"requestsPerServerCpuSecond,omitempty"`
}

func runAPI(ctx context.Context, cfg apiConfig) (*apiResult, error) {
	if cfg.C <= 0 || cfg.Duration <= 0 || cfg.Key == "" {
		return nil, fmt.Errorf("api: --key, -c and --duration must be set and positive")
	}
	tr := &http.Transport{MaxIdleConnsPerHost: cfg.C, MaxConnsPerHost: cfg.C}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	type tally struct {
		n, errs int64
		status  map[string]int
		lat     hist
	}
	tallies := make([]tally, cfg.C)
	cpu, err := startCPU(cfg.ServerPID)
	if err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range tallies {
		t := &tallies[i]
		t.status = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL.String(), strings.NewReader(cfg.Body))
				if err != nil {
					t.errs++
					return
				}
				req.Header.Set("Authorization", "apikey "+cfg.Key)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						t.errs++
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				t.lat.Record(time.Since(t0))
				t.status[strconv.Itoa(resp.StatusCode)]++
				t.n++
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	res := &apiResult{URL: cfg.URL.String(), C: cfg.C, Seconds: secs, Status: map[string]int{}}
	var lat hist
	for i := range tallies {
		t := &tallies[i]
		res.Requests += t.n
		res.Errors += t.errs
		for k, v := range t.status {
			res.Status[k] += v
		}
		lat.Merge(&t.lat)
	}
	res.PerSec = float64(res.Requests) / secs
	res.Latency = lat.Summary()
	if used, ok, err := cpu.stop(); err != nil {
		return nil, fmt.Errorf("server cpu: %w", err)
	} else if ok && res.Requests > 0 {
		res.ServerCPU = used.Total().Seconds()
		res.CPUPerRequestUs = res.ServerCPU / float64(res.Requests) * 1e6
		if res.ServerCPU > 0 {
			res.PerCPUSecond = float64(res.Requests) / res.ServerCPU
		}
	}
	return res, nil
}
