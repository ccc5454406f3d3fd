package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
)

// healthWatch samples a server's /readyz and its bus_degraded gauge every
// interval while a run goes on: what a balancer and a dashboard would have
// seen of it.
type healthWatch struct {
	Samples int `json:"samples"`
	// Readyz503 counts samples whose /readyz answered other than 200.
	Readyz503 int `json:"readyz503"`
	// BusDegraded counts samples whose bus_degraded read 1; BusFlips its
	// changes from 0 to 1.
	BusDegraded int `json:"busDegradedSamples"`
	BusFlips    int `json:"busDegradedFlips"`
	// Errors counts samples that got no answer at all.
	Errors int `json:"errors"`

	stop chan struct{}
	wg   sync.WaitGroup
}

// watchHealth starts sampling base (http://host:port) every interval until
// stop.
func watchHealth(ctx context.Context, base string, interval time.Duration) *healthWatch {
	w := &healthWatch{stop: make(chan struct{})}
	base = strings.TrimSuffix(base, "/")
	w.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		last := 0.0
		for {
			w.sample(ctx, base, &last)
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return w
}

func (w *healthWatch) sample(ctx context.Context, base string, last *float64) {
	w.Samples++
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.Errors++
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		w.Readyz503++
	}
	v, err := scrapeMetric(ctx, base+"/metrics", "bus_degraded")
	if err != nil {
		w.Errors++
		return
	}
	if v == 1 {
		w.BusDegraded++
		if *last == 0 {
			w.BusFlips++
		}
	}
	*last = v
}

// end stops sampling and returns the counts.
func (w *healthWatch) end() *healthWatch {
	close(w.stop)
	w.wg.Wait()
	return w
}
