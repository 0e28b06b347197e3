package main

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// demoServer is the --server a test's demo runs: "fiber" for the cases
// TestE2EFiber runs again, "connect" for those TestE2EConnect runs again,
// "http" otherwise.
func demoServer(t *testing.T) string {
	switch {
	case strings.HasPrefix(t.Name(), "TestE2EFiber/"):
		return "fiber"
	case strings.HasPrefix(t.Name(), "TestE2EConnect/"):
		return "connect"
	}
	return "http"
}

// TestE2EFiber runs the net/http demo's end-to-end cases (35 of 37), unchanged,
// against `lameduck demo --server fiber`: the same binary, real signals and
// real clients, the same assertions on answers, exit codes and the
// process's log. Left out: the h2c hand-off, as fasthttp speaks no HTTP/2; and
// TestE2EPreStopHookThenSIGTERM, whose held request ends by its client
// leaving: fasthttp never tells a running handler that its client has gone
// (it does not read the connection while the handler runs), so that
// request runs to its end or to the budget.
func TestE2EFiber(t *testing.T) {
	rerun(t,
		TestE2ESIGTERMDrainsInFlightRequest,
		TestE2ENewConnectionsServedThroughWindow,
		TestE2EKeepAliveClientHandedOver,
		TestE2ETeardownBudgetCutsLongRequest,
		TestE2EChecksPanicAndWedgeSurvived,
		TestE2EZeroDelayExitsAtOnce,
		TestE2ESecondSIGTERMDoesNotShortenWindow,
		TestE2EPreStopTwiceOneWindow,
		TestE2ESIGTERMDuringBootWaitsNoWindow,
		TestE2ESecondSignalExitCodes,
		TestE2ESendRetryAfterAnswers503DuringTeardown,
		TestE2EWebSocketUpgradeRefusedAfterSignal,
		TestE2EWebSocketClosedGoingAwayAtWindowEnd,
		TestE2EWebSocketIgnoringCloseIsForceClosed,
		TestE2EIdleDrainTrafficHoldsThenIdleEnds,
		TestE2EIdleDrainBoundEndsSteadyTraffic,
		TestE2EDefaultJoinWaitsForTheWrite,
		TestE2EJoinNamesTheWriteThatOverran,
		TestE2ESlowRejectsBadDurations,
		TestE2ECheckMaxAgeBoundsPings,
		TestE2EChecksBadSpecsFailBeforeListening,
		TestE2EChecksConcurrentMaxNotSum,
		TestE2EChecksEveryMode,
		TestE2EChecksProbeStormSharesPing,
		TestE2EChecksRealStdlib,
		TestE2EChecksSecretsRedacted,
		TestE2EInvalidDurationsFailBeforeListening,
		TestE2ELoopStopsAtSignalAndLateLoopIsRefused,
		TestE2EPreStopBeforeReady,
		TestE2ESecondSIGINTExitsWhenEnabled,
		TestE2EStartupDelay,
		TestE2EServerSentEventsEndCleanly,
		TestE2ERollingRestartZeroFailures,
		TestRolloutDemoDropsNothing,
		TestE2EMetricsScrapedThroughTheTeardown,
	)
}

// rerun runs each of tests, end-to-end tests of the net/http demo, as a
// subtest of t named after it without its Test and E2E prefixes
// (TestE2EFiber/KeepAliveClientHandedOver), so that demoServer gives it
// the server t's name stands for.
func rerun(t *testing.T, tests ...func(*testing.T)) {
	for _, test := range tests {
		name := runtime.FuncForPC(reflect.ValueOf(test).Pointer()).Name()
		name = name[strings.LastIndex(name, ".")+1:]
		t.Run(strings.TrimPrefix(strings.TrimPrefix(name, "Test"), "E2E"), test)
	}
}
