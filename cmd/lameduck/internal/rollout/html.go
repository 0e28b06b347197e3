package rollout

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Colours of the timeline.
var (
	colOK       = color.RGBA{R: 0x2e, G: 0x9e, B: 0x4f, A: 0xff}
	colRunning  = color.RGBA{R: 0xbb, G: 0xbb, B: 0xbb, A: 0xff}
	colRotation = color.RGBA{R: 0x2e, G: 0x9e, B: 0x4f, A: 0xff}
	colDraining = color.RGBA{R: 0xf0, G: 0x9a, B: 0x1a, A: 0xff}
	colRemoved  = color.RGBA{A: 0xff}
	colKind     = map[string]color.RGBA{
		KindStatus:     {R: 0x8e, G: 0x44, B: 0xad, A: 0xff},
		KindRefused:    {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		KindReset:      {R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
		KindEOF:        {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
		KindTimeout:    {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		KindNoEndpoint: {R: 0x17, G: 0x17, B: 0x17, A: 0xff},
		KindOther:      {R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	}
)

// WriteHTMLFile writes the report as one self-contained HTML page: the
// numbers, and two timeline pictures (SVG, drawn with gonum/plot, embedded
// as data URIs): requests per bin, succeeded and failed by kind; and each
// replica's phases (running, in rotation, draining after SIGTERM, endpoint
// removal) with the failed requests on the replica they were sent to.
func (rep *Report) WriteHTMLFile(path string) error {
	traffic, err := rep.trafficSVG()
	if err != nil {
		return fmt.Errorf("lameduck rollout: --report: %w", err)
	}
	lanes, err := rep.lanesSVG()
	if err != nil {
		return fmt.Errorf("lameduck rollout: --report: %w", err)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		return err
	}
	var out bytes.Buffer
	err = pageTemplate.Execute(&out, map[string]any{
		"Title":   strings.Join(rep.Command, " "),
		"Pass":    rep.Failed == 0,
		"Rep":     rep,
		"Kinds":   Kinds,
		"Traffic": template.URL("data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(traffic)),
		"Lanes":   template.URL("data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(lanes)),
		"Text":    text.String(),
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		return fmt.Errorf("lameduck rollout: --report: %w", err)
	}
	return nil
}

// end is the last time the timeline shows, in seconds.
func (rep *Report) end() float64 {
	end := rep.load[1]
	for _, r := range rep.ReplicaReports {
		if r.Exited != nil {
			end = math.Max(end, *r.Exited)
		}
	}
	return end
}

// trafficSVG draws requests per 250ms bin.
func (rep *Report) trafficSVG() ([]byte, error) {
	const bin = 0.25
	n := int(rep.end()/bin) + 1
	ok := make(plotter.XYs, n)
	for i := range ok {
		ok[i].X = float64(i) * bin
	}
	failed := map[string]plotter.XYs{}
	for _, s := range rep.samples {
		i := min(int(secs(s.At)/bin), n-1)
		if s.Kind == "" {
			ok[i].Y++
			continue
		}
		xy := failed[s.Kind]
		if len(xy) == 0 || xy[len(xy)-1].X != float64(i)*bin {
			xy = append(xy, plotter.XY{X: float64(i) * bin})
		}
		xy[len(xy)-1].Y++
		failed[s.Kind] = xy
	}
	p := plot.New()
	p.Title.Text = "Requests per 250ms: succeeded, and failed by kind"
	p.X.Label.Text = "seconds since start"
	p.Y.Label.Text = "requests"
	p.X.Min, p.X.Max = 0, rep.end()
	p.Add(plotter.NewGrid())
	line, err := plotter.NewLine(ok)
	if err != nil {
		return nil, err
	}
	line.Color, line.Width = colOK, vg.Points(1.5)
	p.Add(line)
	p.Legend.Add("succeeded", line)
	for _, k := range Kinds {
		xy := failed[k]
		if len(xy) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xy)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: colKind[k], Radius: vg.Points(3), Shape: draw.CircleGlyph{}}
		p.Add(sc)
		p.Legend.Add(k, sc)
	}
	p.Legend.Top = true
	return svgBytes(p, 10*vg.Inch, 3.2*vg.Inch)
}

// lane is one replica's or pod's row of the timeline picture, in
// seconds from the start.
type lane struct {
	label      string
	id         int // the replica failed requests name; 0 for a pod
	start, end float64
	rotation   [][2]float64 // in the balancer's rotation, or ready in its EndpointSlice
	drainFrom  *float64     // SIGTERM, or the deletion's request
	removed    *float64     // the endpoint removed
}

// lanes returns a lane per replica (local) or per pod (cluster).
func (rep *Report) lanes() []lane {
	end := rep.end()
	var out []lane
	for _, r := range rep.ReplicaReports {
		l := lane{label: strconv.Itoa(r.ID), id: r.ID, end: end, removed: r.Removed}
		if r.Started != nil {
			l.start = *r.Started
		}
		if r.Exited != nil {
			l.end = *r.Exited
		}
		var in *float64
		for _, e := range r.events {
			t := secs(e.At)
			switch e.What {
			case evIn:
				in = &t
			case evOut:
				if in != nil {
					l.rotation = append(l.rotation, [2]float64{*in, t})
					in = nil
				}
			}
		}
		if in != nil {
			l.rotation = append(l.rotation, [2]float64{*in, l.end})
		}
		l.drainFrom = r.Sigterm
		if l.drainFrom == nil {
			l.drainFrom = r.Stopped
		}
		if r.Sigterm == nil {
			l.removed = nil
		}
		out = append(out, l)
	}
	for _, p := range rep.Pods {
		l := lane{label: p.Name, end: end, drainFrom: p.DeletionRequested, removed: p.EndpointRemoved}
		if p.Created != nil {
			l.start = math.Max(0, *p.Created)
		}
		if p.Exited != nil {
			l.end = *p.Exited
		} else if p.Deleted != nil {
			l.end = *p.Deleted
		}
		var in *float64
		for _, e := range p.Timeline {
			t := e.At
			switch e.What {
			case tlEPReady:
				if in == nil {
					in = &t
				}
			case tlEPNotReady, tlEPRemoved:
				if in != nil {
					l.rotation = append(l.rotation, [2]float64{*in, t})
					in = nil
				}
			}
		}
		if in != nil {
			l.rotation = append(l.rotation, [2]float64{*in, l.end})
		}
		out = append(out, l)
	}
	return out
}

// lanesSVG draws one lane per replica or pod.
func (rep *Report) lanesSVG() ([]byte, error) {
	lanes := rep.lanes()
	p := plot.New()
	p.Title.Text = "Replicas: the process (top), the balancer's rotation (middle), failed requests sent to it (bottom)"
	p.Y.Label.Text = "replica"
	if rep.Cluster != nil {
		p.Title.Text = "Pods: the pod until its container exited (top), ready in its EndpointSlice (middle); failed requests (bottom lane: any pod)"
		p.Y.Label.Text = "pod"
	}
	p.X.Label.Text = "seconds since start"
	p.X.Min, p.X.Max = 0, rep.end()
	p.Y.Min, p.Y.Max = 0.4, float64(len(lanes))+1.9 // room for the legend
	var ticks []plot.Tick
	seg := func(y, x0, x1 float64, c color.Color, w vg.Length) error {
		l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
		if err != nil {
			return err
		}
		l.Color, l.Width = c, w
		p.Add(l)
		return nil
	}
	legendDone := map[string]bool{}
	legend := func(name string, t plot.Thumbnailer) {
		if !legendDone[name] {
			legendDone[name] = true
			p.Legend.Add(name, t)
		}
	}
	for i, l := range lanes {
		y := float64(i + 1)
		ticks = append(ticks, plot.Tick{Value: y, Label: l.label})
		// The process, top row: running, then draining from SIGTERM.
		if err := seg(y+0.25, l.start, l.end, colRunning, vg.Points(4)); err != nil {
			return nil, err
		}
		for _, r := range l.rotation {
			if err := seg(y, r[0], r[1], colRotation, vg.Points(9)); err != nil {
				return nil, err
			}
		}
		if l.drainFrom != nil {
			if err := seg(y+0.25, *l.drainFrom, math.Max(l.end, *l.drainFrom+0.02), colDraining, vg.Points(4)); err != nil {
				return nil, err
			}
		}
		if l.removed != nil {
			sc, err := plotter.NewScatter(plotter.XYs{{X: *l.removed, Y: y}})
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: colRemoved, Radius: vg.Points(5), Shape: draw.CrossGlyph{}}
			p.Add(sc)
			legend("endpoint removed", sc)
		}
	}
	// Legend swatches.
	for _, sw := range []struct {
		name string
		c    color.Color
		w    vg.Length
	}{{"process running", colRunning, 4}, {"process draining (SIGTERM → exit)", colDraining, 4}, {"in the balancer's rotation", colRotation, 9}} {
		l, _ := plotter.NewLine(plotter.XYs{{X: -1, Y: -1}, {X: -1, Y: -1}})
		l.Color, l.Width = sw.c, vg.Points(float64(sw.w))
		legend(sw.name, l)
	}
	// Failed requests on their replica's lane.
	laneOf := map[int]float64{}
	for i, l := range lanes {
		if l.id != 0 {
			laneOf[l.id] = float64(i + 1)
		}
	}
	failed := map[string]plotter.XYs{}
	for _, s := range rep.samples {
		if s.Kind == "" {
			continue
		}
		y, ok := laneOf[s.Replica]
		if !ok {
			y = 0.5
		}
		failed[s.Kind] = append(failed[s.Kind], plotter.XY{X: secs(s.At), Y: y - 0.25})
	}
	for _, k := range Kinds {
		if len(failed[k]) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(failed[k])
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: colKind[k], Radius: vg.Points(2), Shape: draw.CircleGlyph{}}
		p.Add(sc)
		legend("failed: "+k, sc)
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top = true
	p.Legend.Left = true
	h := vg.Length(2+0.45*float64(len(lanes))) * vg.Inch
	return svgBytes(p, 10*vg.Inch, max(h, 3*vg.Inch))
}

func svgBytes(p *plot.Plot, w, h vg.Length) ([]byte, error) {
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

var pageTemplate = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>lameduck rollout: {{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;max-width:1000px;color:#222}
h1{font-size:20px;margin:0 0 4px} .pass{color:#2e9e4f} .fail{color:#d62728}
table{border-collapse:collapse;margin:8px 0} td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
img{width:100%;border:1px solid #eee;margin:8px 0} pre{background:#f8f8f8;padding:8px;overflow:auto;font-size:12px}
</style></head><body>
<h1>lameduck rollout: <code>{{.Title}}</code></h1>
<p class="{{if .Pass}}pass{{else}}fail{{end}}"><b>{{if .Pass}}PASS: none of {{.Rep.Requests}} requests failed{{else}}FAIL: {{.Rep.Failed}} of {{.Rep.Requests}} requests failed{{end}}</b>
{{with .Rep.Cluster}}· deployment/{{.Deployment}} in namespace {{.Namespace}} ({{.Context}}) · {{$.Rep.Replicas}} replicas × {{$.Rep.Rounds}} rounds ·
{{.Strategy}}, grace {{.GraceSeconds}}s · {{$.Rep.Rate}} req/s to {{.URL}} · SIGKILLed pods {{.KilledPods}} · re-sent {{$.Rep.Resent}}</p>
{{else}}· {{.Rep.Replicas}} replicas × {{.Rep.Rounds}} rounds · {{.Rep.Mode}} balancer · {{.Rep.Rate}} req/s ·
endpoint removal {{index .Rep.RemovalDelay 0}}–{{index .Rep.RemovalDelay 1}} after SIGTERM · re-sent {{.Rep.Resent}}</p>{{end}}
<table><tr><th>failures</th>{{range .Kinds}}<th>{{.}}</th>{{end}}</tr>
<tr><td>requests</td>{{range .Kinds}}<td>{{index $.Rep.Failures .}}</td>{{end}}</tr></table>
<table><tr><th>latency</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>
<tr><td>ms</td><td>{{printf "%.1f" .Rep.Latency.Mean}}</td><td>{{printf "%.1f" .Rep.Latency.P50}}</td><td>{{printf "%.1f" .Rep.Latency.P90}}</td><td>{{printf "%.1f" .Rep.Latency.P99}}</td><td>{{printf "%.1f" .Rep.Latency.Max}}</td></tr></table>
<img alt="requests over time" src="{{.Traffic}}">
<img alt="replica phases" src="{{.Lanes}}">
<pre>{{.Text}}</pre>
</body></html>
`))
