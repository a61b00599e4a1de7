package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// chartFormats are written for every chart: SVG for the docs, PNG for
// viewers that do not render SVG.
var chartFormats = []string{"svg", "png"}

const chartWidth, chartHeight = 8 * vg.Inch, 4.5 * vg.Inch

// WriteCharts writes the share/demand chart and the admitted/rejected chart
// of res into dir and returns the paths written.
func WriteCharts(dir string, res *Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	base := filepath.Join(dir, res.Scenario.Name+"-"+res.Policy)
	var paths []string
	for _, c := range []struct {
		suffix string
		build  func(*Result) (*plot.Plot, error)
	}{{"shares", sharesChart}, {"admitted", admittedChart}} {
		p, err := c.build(res)
		if err != nil {
			return nil, fmt.Errorf("%s chart: %w", c.suffix, err)
		}
		for _, ext := range chartFormats {
			path := base + "-" + c.suffix + "." + ext
			if err := p.Save(chartWidth, chartHeight, path); err != nil {
				return nil, err
			}
			paths = append(paths, path)
		}
	}
	return paths, nil
}

// sharesChart draws each client's (or group's) share as a solid line and
// its demand (attempts) as a dashed line of the same colour, as steps: both
// hold for a whole cycle. The horizontal gap between the two is the
// policy's lag.
func sharesChart(res *Result) (*plot.Plot, error) {
	p := cycleChart(res, "share (solid) and demand (dashed)", "requests")
	cycles := len(res.Demand)
	shares := make([]plotter.XYs, len(res.Groups))
	demands := make([]plotter.XYs, len(res.Groups))
	var top float64
	// One point per cycle, and one more at the end so the last cycle's
	// step has its width.
	for k := 0; k <= cycles; k++ {
		row := min(k, cycles-1)
		for g, r := range res.groupRows(row) {
			shares[g] = append(shares[g], plotter.XY{X: float64(k + 1), Y: float64(max(r.share, 0))})
			demands[g] = append(demands[g], plotter.XY{X: float64(k + 1), Y: float64(r.demand)})
			top = math.Max(top, float64(max(r.share, r.demand)))
		}
	}
	for g, name := range res.Groups {
		share, err := stepLine(shares[g], g, nil)
		if err != nil {
			return nil, err
		}
		demand, err := stepLine(demands[g], g, []vg.Length{vg.Points(4), vg.Points(3)})
		if err != nil {
			return nil, err
		}
		p.Add(share, demand)
		p.Legend.Add(name, share)
	}
	fitY(p, top)
	return p, nil
}

// cycleChart is an empty chart of what per cycle of res, over whole cycles
// on the X axis and unit per cycle on the Y axis, with the legend on top.
func cycleChart(res *Result, what, unit string) *plot.Plot {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s (%s): %s per cycle", res.Scenario.Name, res.Policy, what)
	p.X.Label.Text = "cycle"
	p.X.Tick.Marker = cycleTicks(len(res.Demand))
	p.Y.Label.Text = unit + " per cycle"
	p.Legend.Top = true
	return p
}

func stepLine(xys plotter.XYs, colour int, dashes []vg.Length) (*plotter.Line, error) {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.StepStyle = plotter.PostStep
	l.Color = plotutil.Color(colour)
	l.Width = vg.Points(2)
	l.Dashes = dashes
	return l, nil
}

// cycleTicks labels whole cycles only, at most about a dozen of them.
func cycleTicks(cycles int) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		step := max(1, (cycles+11)/12)
		var ticks []plot.Tick
		for c := 1; float64(c) <= hi; c += step {
			if float64(c) >= lo {
				ticks = append(ticks, plot.Tick{Value: float64(c), Label: strconv.Itoa(c)})
			}
		}
		return ticks
	})
}

// fitY starts the Y axis at 0 and leaves headroom above the data for the
// legend, which sits in the top right corner.
func fitY(p *plot.Plot, top float64) {
	p.Y.Min = 0
	p.Y.Max = math.Max(1, top*1.35)
}

// admittedChart stacks admitted and rejected attempts per cycle, with the
// capacity as a line: admitted bars under the line with red above them
// are capacity that was there and turned requests away.
func admittedChart(res *Result) (*plot.Plot, error) {
	p := cycleChart(res, "admitted and rejected", "attempts")
	cycles := len(res.Demand)
	admitted := make(plotter.Values, cycles)
	rejected := make(plotter.Values, cycles)
	capLine := make(plotter.XYs, cycles)
	for k := 0; k < cycles; k++ {
		admitted[k] = float64(sum(res.Admitted[k]))
		rejected[k] = float64(sum(res.Rejected[k]))
		capLine[k] = plotter.XY{X: float64(k + 1), Y: float64(res.Scenario.Capacity)}
	}
	width := barWidth(cycles)
	a, err := plotter.NewBarChart(admitted, width)
	if err != nil {
		return nil, err
	}
	a.Color = plotutil.Color(2)
	a.XMin = 1
	r, err := plotter.NewBarChart(rejected, width)
	if err != nil {
		return nil, err
	}
	r.Color = plotutil.Color(0)
	r.XMin = 1
	r.StackOn(a)
	c, err := plotter.NewLine(capLine)
	if err != nil {
		return nil, err
	}
	c.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	c.Width = vg.Points(1.5)
	p.Add(a, r, c)
	var top float64
	for k := range admitted {
		top = math.Max(top, math.Max(admitted[k]+rejected[k], float64(res.Scenario.Capacity)))
	}
	fitY(p, top)
	p.Legend.Add("admitted", a)
	p.Legend.Add("rejected", r)
	p.Legend.Add("capacity", c)
	return p, nil
}

// barWidth keeps bars from overlapping on long runs.
func barWidth(cycles int) vg.Length {
	w := (chartWidth - vg.Inch) / vg.Length(2*max(cycles, 1))
	return min(w, vg.Points(18))
}
