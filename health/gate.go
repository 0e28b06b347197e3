package health

import (
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// gateState is one registered gate and its last logged outcome.
type gateState struct {
	Gate // immutable
	c    *Checker

	mu   sync.Mutex
	last Outcome // guarded by mu: the outcome last logged; "" before the first
}

// eval calls the gate's Func in the probe's goroutine and turns its answer
// into a Result. A panic is recovered, reported and fails the gate.
func (gs *gateState) eval() Result {
	var (
		gr    GateResult
		pv    any
		stack []byte
	)
	func() {
		normal := false
		defer func() {
			if !normal {
				pv = recover() // nil only for runtime.Goexit, which goes on unwinding
				stack = debug.Stack()
			}
		}()
		gr = gs.Func()
		normal = true
	}()
	hide := gs.c.opts.HideDetails
	res := Result{Name: gs.Name, Critical: true, Gate: true, Time: time.Now()}
	var logText string
	switch {
	case pv != nil:
		res.Outcome, res.Text, logText = OutcomePanic, panicText(pv, hide), panicText(pv, false)
	case !gr.Applicable:
		res.Outcome, res.Text, logText = OutcomeSkipped, detail(OutcomeSkipped, gr.Reason, hide), detail(OutcomeSkipped, gr.Reason, false)
	case gr.OK:
		res.Outcome, res.Text, logText = OutcomeOK, string(OutcomeOK), string(OutcomeOK)
	default:
		res.Outcome, res.Text, logText = OutcomeFailed, detail(OutcomeFailed, gr.Reason, hide), detail(OutcomeFailed, gr.Reason, false)
	}
	gs.mu.Lock()
	var line *logLine
	if stack != nil {
		line = transition(&gs.last, "gate", gs.Name, true, res.Outcome, logText, slog.String("stack", string(stack)))
	} else {
		line = transition(&gs.last, "gate", gs.Name, true, res.Outcome, logText)
	}
	gs.mu.Unlock()
	gs.c.emit(line)
	if pv != nil {
		gs.c.reportPanic(gs.Name, pv, stack)
	}
	return res
}
