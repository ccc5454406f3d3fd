// Command rtbench is a load generator for rtserver, for loopback targets
// only. It measures what the performance budgets of BENCHMARKS.md name:
//
//	rtbench connect  a storm of upgrade attempts: accepted vs shed (HTTP status,
//	                 close code), accept/reject latency, server CPU per attempt,
//	                 and optionally established probe clients' round trips
//	                 before and during the storm
//	rtbench storm    the storm-isolation harness: probe clients in a process of
//	                 their own on the server's core, the storm in another on the
//	                 other core, so the factor is the server's, not rtbench's
//	rtbench idle     N idle connections (WebSockets, or with --sse event streams): server RSS and goroutines per connection
//	rtbench fanout   P publishers, S subscribers over T topics: delivered/s,
//	                 end-to-end latency, server CPU per million delivered
//	rtbench rpc      paced calls to one method: calls/s and the share answered
//	                 OK, -32001, -32002, other
//	rtbench siblings N simulated instances sending cluster rate envelopes
//	                 over Redis to a real server: its CPU per envelope, RSS,
//	                 whether its view is right, how fast silent ones leave
//	rtbench serve503 a trivial HTTP responder that answers every request 503,
//	                 the control for the storm-isolation measurement
//
// It owns: its own process (it raises its RLIMIT_NOFILE to the hard limit)
// and the connections it opens. Every mode is bounded in time (--max-time
// and the mode's own duration) and in count.
//
// It must never: send traffic to anything but 127.0.0.0/8, ::1 or localhost
// (every URL, Redis URL and listen address is checked before any socket is
// opened).
//
// Clients are raw github.com/coder/websocket connections, not the client
// package: its reconnect loop and call bookkeeping would add work (and
// retries) to the measured loops. Their hot loops use the library as
// cheaply as its API allows (libconn.go: each message read into one
// buffer, the socket read 16 KiB at a time, no context per publish), the
// same for every server they measure. With fanout --raw, rtserver's clients
// skip the library too and read and write frames themselves
// (rawconn.go): the generator then takes less of the machine from the
// server it measures. Latencies are recorded in a log-linear
// histogram with a relative error under 1/128 (see hist.go); server CPU is
// utime+stime from /proc/PID/stat and RSS is VmRSS from /proc/PID/status.
package main
