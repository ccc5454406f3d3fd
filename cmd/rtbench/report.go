package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// printTable writes a result for people: one "name  value" row each.
func printTable(out io.Writer, res any) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	defer w.Flush()
	row := func(k string, format string, a ...any) { fmt.Fprintf(w, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	lat := func(k string, l latency) {
		row(k, "n=%d  p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  p99.9 %.3f ms  max %.3f ms", l.N, l.P50, l.P90, l.P99, l.P999, l.Max)
	}
	counts := func(m map[string]int) string {
		var parts []string
		for _, k := range sortedKeys(m) {
			parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, ", ")
	}
	switch r := res.(type) {
	case *connectResult:
		row("target", "%s", r.URL)
		row("attempts", "%d in %.2f s (%.0f/s)", r.Attempts, r.Seconds, r.PerSec)
		row("accepted (held)", "%d (at most %d open at once)", r.Accepted, r.PeakOpen)
		row("shed", "%d  (503: %d, 429: %d, other HTTP: %s, close codes: %s)", r.Shed, r.Shed503, r.Shed429, counts(r.ShedOtherHTTP), counts(r.ShedClose))
		row("errors", "%d  (%s)", r.Errors, counts(r.ErrorKinds))
		lat("accept latency", r.AcceptLat)
		lat("reject latency", r.RejectLat)
		if r.ServerCPU > 0 {
			row("server CPU", "%.3f s (user %.3f, sys %.3f)  =  %.1f µs/attempt  %.1f µs/shed", r.ServerCPU, r.ServerUser, r.ServerSys, r.CPUPerTry, r.CPUPerShed)
		}
		row("rtbench CPU", "%.3f s", r.ClientCPU)
		if p := r.Probe; p != nil {
			row("probes", "%d clients, %.0f round trips/s", p.Clients, p.Rate)
			lat("probe RTT baseline", p.Baseline)
			lat("probe RTT storm", p.Storm)
			row("probe failures", "baseline %d, storm %d", p.BaselineFailed, p.StormFailed)
			row("probe p99 storm/baseline", "%.2f×", p.P99Factor)
		}
	case *idleResult:
		row("target", "%s", r.URL)
		row("connected", "%d of %d in %.2f s (open at measurement: %d; failed: %s)", r.Connected, r.Attempted, r.DialSeconds, r.Open, counts(r.FailKinds))
		lat("accept latency", r.AcceptLat)
		if r.RSSAfter > 0 {
			row("server RSS", "%.1f MiB -> %.1f MiB  =  %.2f KiB/connection", float64(r.RSSBefore)/(1<<20), float64(r.RSSAfter)/(1<<20), r.RSSPerConn/1024)
		}
		if r.GoAfter > 0 {
			row("server goroutines", "%.0f -> %.0f  =  %.2f/connection (connections_open %.0f)", r.GoBefore, r.GoAfter, r.GoPerConn, r.ConnsOpen)
		}
	case *fanoutResult:
		row("target", "%s", r.URL)
		if r.PubURL != "" {
			row("publishers' target", "%s", r.PubURL)
		}
		row("shape", "%d publishers -> %d subscribers over %d topics, %d-byte data, batch %v (negotiated by %d)", r.Publishers, r.Subscribers, r.Topics, r.Size, r.Batch, r.BatchNegotiated)
		row("published", "%d (%.0f/s)  errors: %s", r.Published, r.PublishPerSec, counts(r.PublishErrors))
		row("delivered", "%d of %d expected in %.2f s  =  %.0f msg/s, %.2f msg/frame; missing %d", r.Delivered, r.Expected, r.Seconds, r.DeliveredPerSec, r.MsgsPerFrame, r.Missing)
		lat("end-to-end latency", r.Latency)
		row("subscribers closed", "%s", counts(r.SubsClosed))
		if r.ServerCPU > 0 {
			row("server CPU", "%.3f s (user %.3f, sys %.3f)  =  %.3f s per million delivered", r.ServerCPU, r.ServerUser, r.ServerSys, r.CPUPerMillion)
		}
		if r.PubServerCPU > 0 {
			row("publishers' server CPU", "%.3f s", r.PubServerCPU)
		}
		row("rtbench CPU", "%.3f s", r.ClientCPU)
	case *rpcResult:
		row("target", "%s method %s at %.0f/s", r.URL, r.Method, r.Rate)
		row("sent", "%d in %.2f s, answered %.0f/s, unanswered %d, late %d", r.Sent, r.Seconds, r.PerSec, r.Unanswered, r.Late)
		row("OK", "%d (%.1f%%)", r.OK, 100*r.ShareOK)
		row("-32001 OVERLOADED", "%d (%.1f%%)", r.Overloaded, 100*r.ShareOverloaded)
		row("-32002 RATE_LIMITED", "%d (%.1f%%)", r.RateLimited, 100*r.ShareRateLimited)
		row("other", "%s (%.1f%%)", counts(r.Other), 100*r.ShareOther)
		lat("latency", r.Latency)
		if r.ServerCPU > 0 {
			row("server CPU", "%.3f s", r.ServerCPU)
		}
	case *siblingsResult:
		row("siblings", "%d, %d envelopes of %.0f bytes (signed %v, churn %.0f%%)", r.Siblings, r.Envelopes, r.EnvelopeBytes, r.Signed, 100*r.Churn)
		row("server received", "%.0f envelopes in %.2f s measured", r.Received, r.Seconds)
		if r.ServerCPU > 0 {
			row("server CPU", "%.3f s = %.2f%% of a core (idle: %.2f%%), %.1f µs per envelope net of idle", r.ServerCPU, r.CPUPercent, r.IdlePercent, r.PerEnvelope)
			row("server RSS", "%.1f MiB", float64(r.RSSBytes)/(1<<20))
		}
		row("view", "%.0f siblings, hot topic %.1f msg/s (want %.1f): correct %v", r.ViewSiblings, r.ViewHotRate, r.WantHotRate, r.ViewCorrect)
		row("fleet egress", "%.1f MB/s if all %d instances subscribed", r.FleetEgressMBps, r.Siblings+1)
		if r.StaleSeconds > 0 {
			row("staleness", "view empty %.2f s after the last envelope", r.StaleSeconds)
		}
	case *apiResult:
		row("target", "%s, %d callers", r.URL, r.C)
		row("requests", "%d in %.2f s = %.0f/s, transport errors %d", r.Requests, r.Seconds, r.PerSec, r.Errors)
		row("status", "%s", counts(r.Status))
		lat("latency", r.Latency)
		if r.ServerCPU > 0 {
			row("server CPU", "%.3f s = %.1f us per request = %.0f requests per CPU second", r.ServerCPU, r.CPUPerRequestUs, r.PerCPUSecond)
		}
	default:
		fmt.Fprintf(w, "%+v\n", res)
	}
}
