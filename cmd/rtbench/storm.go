package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/rtserver/rtserver/internal/ctxsleep"
)

// stormConfig is the storm-isolation harness: how much a connect storm
// slows the clients already connected, measured so that the load
// generator's own work cannot pass for the server's. The probe clients run
// in a process of their own on the server's core (ProbeCPU), the storm in
// another on the other core (StormCPU): in one process, the storm's
// dialers delay the probes' own reads and the factor measures rtbench.
type stormConfig struct {
	URL          *url.URL // the server under test (probes connect here)
	StormURL     *url.URL // where the storm goes: URL, or a 503 responder for the control run
	N, C         int
	Hold         time.Duration
	ProbeClients int
	ProbeRate    float64
	Baseline     time.Duration
	ProbeCPU     string // taskset CPU list for the probe process ("" = not pinned)
	StormCPU     string // and for the storm process
	ServerPID    int
	MaxTime      time.Duration
}

// runStorm starts the probe process (whose own storm is a dummy of one
// attempt a second at a 503 responder served here, for one second after
// its baseline), launches the real storm in a second process so that it
// falls in that second, and reports the storm's result with the probes'.
func runStorm(ctx context.Context, cfg stormConfig) (*connectResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	dctx, stopDummy := context.WithCancel(ctx)
	defer stopDummy()
	go func() { _ = serve503(dctx, ln) }() // ends with dctx
	dummy := "ws://" + ln.Addr().String() + "/ws"

	maxTime := cfg.MaxTime.String()
	probeArgs := []string{"connect", "--url", dummy, "-n", "1000000", "-c", "1", "--rate", "1", "--hold", "100ms", "--duration", "1s",
		"--probe-url", cfg.URL.String(), "--probe-clients", strconv.Itoa(cfg.ProbeClients),
		"--probe-rate", strconv.FormatFloat(cfg.ProbeRate, 'f', -1, 64), "--baseline", cfg.Baseline.String(),
		"--max-time", maxTime, "--json"}
	probeCmd, probeOut := pinned(ctx, cfg.ProbeCPU, self, probeArgs)
	if err := probeCmd.Start(); err != nil {
		return nil, fmt.Errorf("probe process: %w", err)
	}
	// The probes' storm phase starts when their baseline ends; the real
	// storm starts just inside it.
	ctxsleep.Sleep(ctx, cfg.Baseline+150*time.Millisecond)
	stormArgs := []string{"connect", "--url", cfg.StormURL.String(), "-n", strconv.Itoa(cfg.N), "-c", strconv.Itoa(cfg.C),
		"--hold", cfg.Hold.String(), "--max-time", maxTime, "--json"}
	if cfg.ServerPID > 0 {
		stormArgs = append(stormArgs, "--server-pid", strconv.Itoa(cfg.ServerPID))
	}
	stormCmd, stormOut := pinned(ctx, cfg.StormCPU, self, stormArgs)
	stormErr := stormCmd.Run()
	probeErr := probeCmd.Wait()
	if stormErr != nil {
		return nil, fmt.Errorf("storm process: %w (%s)", stormErr, bytes.TrimSpace(stormOut.stderr.Bytes()))
	}
	if probeErr != nil {
		return nil, fmt.Errorf("probe process: %w (%s)", probeErr, bytes.TrimSpace(probeOut.stderr.Bytes()))
	}
	var storm, probe connectResult
	if err := json.Unmarshal(stormOut.stdout.Bytes(), &storm); err != nil {
		return nil, fmt.Errorf("storm process output: %w", err)
	}
	if err := json.Unmarshal(probeOut.stdout.Bytes(), &probe); err != nil || probe.Probe == nil {
		return nil, fmt.Errorf("probe process output: %v", err)
	}
	storm.Probe = probe.Probe
	return &storm, nil
}

type captured struct{ stdout, stderr bytes.Buffer }

// pinned is the command running rtbench with args, under taskset -c cpus
// when cpus is set.
func pinned(ctx context.Context, cpus, self string, args []string) (*exec.Cmd, *captured) {
	name := self
	if cpus != "" {
		name, args = "taskset", append([]string{"-c", cpus, self}, args...)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	out := &captured{}
	cmd.Stdout, cmd.Stderr = &out.stdout, &out.stderr
	return cmd, out
}
