package health

import "strings"

// WithoutDetails returns rep with every check's and gate's text cut to its
// outcome word ("error: dial tcp 10.0.0.7:5432: connection refused" becomes
// "error"), in Checks and in Results: what a probe body may show to a
// client that must not learn the hosts, ports and names of the backends.
// The status word, the HTTP code, the names and everything else are kept,
// so a kubelet or a load balancer reads the same answer.
//
// When no text carries a detail (every check "ok", say), rep is returned as
// is, without a copy; otherwise the maps and slices are copied and rep is
// not modified. It is safe for concurrent use.
func (rep Report) WithoutDetails() Report {
	detailed := false
	for _, t := range rep.Checks {
		if strings.IndexByte(t, ':') >= 0 {
			detailed = true
			break
		}
	}
	for _, r := range rep.Results {
		if r.Text != string(r.Outcome) {
			detailed = true
			break
		}
	}
	if !detailed {
		return rep
	}
	if rep.Checks != nil {
		m := make(map[string]string, len(rep.Checks))
		for name, t := range rep.Checks {
			m[name] = outcomeWord(t)
		}
		rep.Checks = m
	}
	if rep.Results != nil {
		rs := make([]Result, len(rep.Results))
		for i, r := range rep.Results {
			r.Text = string(r.Outcome)
			if r.Outcome == "" {
				r.Text = outcomeWord(rep.Results[i].Text)
			}
			rs[i] = r
		}
		rep.Results = rs
	}
	return rep
}

// outcomeWord returns the word before the first ':' of a result text.
func outcomeWord(text string) string {
	w, _, _ := strings.Cut(text, ":")
	return w
}

// hideIf returns rep.WithoutDetails() when info asks for it.
func hideIf(info *Info, rep Report) Report {
	if info != nil && info.HideDetails {
		return rep.WithoutDetails()
	}
	return rep
}
