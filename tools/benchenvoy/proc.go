package main

// What Linux's /proc says about a process: the CPU it has used, the CPUs
// it may run on, and the binary it runs.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
// The kernel fixes it at 100 for user space on every architecture Envoy
// ships for; getconf CLK_TCK confirms it when available.
func clockTicks() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return float64(n)
		}
	}
	return 100
}

// cpuTicks returns utime+stime of a process from /proc/<pid>/stat: the CPU
// all of its threads have used, in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(raw))
}

// parseStatCPU reads utime (field 14) and stime (field 15) of a stat line.
// The command name (field 2) is in parentheses and may itself hold spaces
// and parentheses, so fields are counted from the last ')'.
func parseStatCPU(line string) (uint64, error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return 0, errors.New("stat line without a command name")
	}
	f := strings.Fields(line[end+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("stat line has %d fields after the name, want >= 13", len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("stat utime/stime: %w", err)
	}
	return utime + stime, nil
}

// cpuSteal returns the steal time of cpu from /proc/stat, in clock ticks:
// the time the hypervisor ran something else while that virtual CPU had
// work. A measured Envoy loses it without its own CPU time showing it.
func cpuSteal(cpu int) (uint64, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseSteal(string(raw), cpu)
}

// parseSteal reads the steal field (the eighth number) of cpu's line of a
// /proc/stat.
func parseSteal(stat string, cpu int) (uint64, error) {
	name := "cpu" + strconv.Itoa(cpu)
	for line := range strings.Lines(stat) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != name {
			continue
		}
		if len(f) < 9 {
			return 0, fmt.Errorf("/proc/stat: %s has %d fields, want >= 9", name, len(f))
		}
		return strconv.ParseUint(f[8], 10, 64)
	}
	return 0, fmt.Errorf("/proc/stat: no line for %s", name)
}

// allowedCPUs lists the CPUs this process may run on, from
// /proc/self/status (Cpus_allowed_list, e.g. "0-3,6").
func allowedCPUs() ([]int, error) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	return cpusAllowed(string(raw))
}

// cpusAllowed reads Cpus_allowed_list from a /proc status file.
func cpusAllowed(status string) ([]int, error) {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "Cpus_allowed_list" {
			return parseCPUList(strings.TrimSpace(v))
		}
	}
	return nil, errors.New("status file has no Cpus_allowed_list")
}

func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// checkIsEnvoy makes sure pid runs the Envoy binary, so the CPU read from
// its stat is Envoy's and not the wrapper's.
func checkIsEnvoy(pid int, envoy string) error {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return err
	}
	want, err := filepath.EvalSymlinks(envoy)
	if err != nil {
		return err
	}
	if exe != want {
		return fmt.Errorf("pid %d runs %s, not %s", pid, exe, want)
	}
	return nil
}

// checkPinned makes sure every thread of pid may run on cpu only.
func checkPinned(pid, cpu int) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			return err
		}
		cpus, err := cpusAllowed(string(raw))
		if err != nil {
			return err
		}
		if len(cpus) != 1 || cpus[0] != cpu {
			return fmt.Errorf("thread %s of Envoy may run on CPUs %v, want only %d", t.Name(), cpus, cpu)
		}
	}
	return nil
}
