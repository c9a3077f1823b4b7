package main

import (
	"errors"
	"log/slog"
	"math"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
)

// cgroupShare is the part of the cgroup's memory limit that memory_limit:
// auto may use: the rest is for what the Go runtime does not count
// (the binary's pages, the kernel's buffers) and for the GC's lag.
const cgroupShare = 0.9

// memoryLimit is what setMemoryLimit decided.
type memoryLimit struct {
	// Bytes is the soft limit in force; math.MaxInt64 for none.
	Bytes int64
	// Source says where it came from: GOMEMLIMIT, memory_limit, auto,
	// cgroup (auto capped by the cgroup) or off.
	Source string
}

// setMemoryLimit sets the Go runtime's soft memory limit from cfg's
// memory_limit (debug.SetMemoryLimit), so that the heap is bounded by the
// configuration rather than by when the collector happens to run. A set
// GOMEMLIMIT (env) wins: the runtime has read it already. cgroup returns
// the process's cgroup memory limit (memlimit.FromCgroup; an error when
// there is none).
func setMemoryLimit(cfg *config.Config, env func(string) (string, bool), cgroup func() (uint64, error), log *slog.Logger) memoryLimit {
	if v, ok := env("GOMEMLIMIT"); ok && v != "" {
		m := memoryLimit{Bytes: debug.SetMemoryLimit(-1), Source: "GOMEMLIMIT"}
		log.Info("memory limit", "bytes", m.Bytes, "source", m.Source)
		return m
	}
	m := memoryLimit{Bytes: math.MaxInt64, Source: config.MemoryLimitOff}
	switch b := cfg.MemoryLimitBytes(); {
	case b < 0:
	case b > 0:
		m = memoryLimit{Bytes: b, Source: "memory_limit"}
	default:
		m = memoryLimit{Bytes: cfg.AutoMemoryLimit(), Source: config.MemoryLimitAuto}
		switch c, err := cgroup(); {
		case err == nil && c > 0:
			if capped := int64(float64(c) * cgroupShare); capped < m.Bytes {
				m = memoryLimit{Bytes: capped, Source: "cgroup"}
			}
		case err != nil && !errors.Is(err, memlimit.ErrNoLimit) && !errors.Is(err, memlimit.ErrNoCgroup) &&
			!errors.Is(err, memlimit.ErrCgroupsNotSupported):
			log.Warn("memory limit: cannot read the cgroup's memory limit; using memory_limit: auto without it", "err", err)
		}
	}
	debug.SetMemoryLimit(m.Bytes)
	log.Info("memory limit", "bytes", m.Bytes, "source", m.Source)
	return m
}
