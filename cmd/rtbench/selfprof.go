package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// selfProfile profiles rtbench itself over a measured window: the load
// generator shares the machine with the server, so what it spends per
// delivery is part of the measurement (the CPU it takes, the server does
// not get).
type selfProfile struct {
	cpu     *os.File
	memPath string
}

// memProfileRate samples one allocation per this many bytes while a
// memory profile is asked for: fine enough to see every allocation site
// of the hot loops, coarse enough not to change what it measures much.
const memProfileRate = 4096

// setSelfProfileRate is called before anything allocates what is to be
// profiled.
func setSelfProfileRate(memPath string) {
	if memPath != "" {
		runtime.MemProfileRate = memProfileRate
	}
}

// startSelfProfile starts the CPU profile into cpuPath and writes the
// allocations so far to memPath+".start", the base to subtract from the
// profile written by stop (go tool pprof -base). Empty paths profile
// nothing.
func startSelfProfile(cpuPath, memPath string) (*selfProfile, error) {
	p := &selfProfile{memPath: memPath}
	if memPath != "" {
		if err := writeAllocs(memPath + ".start"); err != nil {
			return nil, err
		}
	}
	if cpuPath != "" {
		f, err := os.Create(cpuPath)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		p.cpu = f
	}
	return p, nil
}

func (p *selfProfile) stop() error {
	if p.cpu != nil {
		pprof.StopCPUProfile()
		if err := p.cpu.Close(); err != nil {
			return err
		}
		p.cpu = nil
	}
	if p.memPath != "" {
		err := writeAllocs(p.memPath)
		p.memPath = ""
		return err
	}
	return nil
}

func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("allocs profile: %w", err)
	}
	return f.Close()
}
