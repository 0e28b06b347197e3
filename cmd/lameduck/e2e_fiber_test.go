package main

import (
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
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"SIGTERMDrainsInFlightRequest", TestE2ESIGTERMDrainsInFlightRequest},
		{"NewConnectionsServedThroughWindow", TestE2ENewConnectionsServedThroughWindow},
		{"KeepAliveClientHandedOver", TestE2EKeepAliveClientHandedOver},
		{"TeardownBudgetCutsLongRequest", TestE2ETeardownBudgetCutsLongRequest},
		{"ChecksPanicAndWedgeSurvived", TestE2EChecksPanicAndWedgeSurvived},
		{"ZeroDelayExitsAtOnce", TestE2EZeroDelayExitsAtOnce},
		{"SecondSIGTERMDoesNotShortenWindow", TestE2ESecondSIGTERMDoesNotShortenWindow},
		{"PreStopTwiceOneWindow", TestE2EPreStopTwiceOneWindow},
		{"SIGTERMDuringBootWaitsNoWindow", TestE2ESIGTERMDuringBootWaitsNoWindow},
		{"SecondSignalExitCodes", TestE2ESecondSignalExitCodes},
		{"SendRetryAfterAnswers503DuringTeardown", TestE2ESendRetryAfterAnswers503DuringTeardown},
		{"WebSocketUpgradeRefusedAfterSignal", TestE2EWebSocketUpgradeRefusedAfterSignal},
		{"WebSocketClosedGoingAwayAtWindowEnd", TestE2EWebSocketClosedGoingAwayAtWindowEnd},
		{"WebSocketIgnoringCloseIsForceClosed", TestE2EWebSocketIgnoringCloseIsForceClosed},
		{"IdleDrainTrafficHoldsThenIdleEnds", TestE2EIdleDrainTrafficHoldsThenIdleEnds},
		{"IdleDrainBoundEndsSteadyTraffic", TestE2EIdleDrainBoundEndsSteadyTraffic},
		{"DefaultJoinWaitsForTheWrite", TestE2EDefaultJoinWaitsForTheWrite},
		{"JoinNamesTheWriteThatOverran", TestE2EJoinNamesTheWriteThatOverran},
		{"SlowRejectsBadDurations", TestE2ESlowRejectsBadDurations},
		{"CheckMaxAgeBoundsPings", TestE2ECheckMaxAgeBoundsPings},
		{"ChecksBadSpecsFailBeforeListening", TestE2EChecksBadSpecsFailBeforeListening},
		{"ChecksConcurrentMaxNotSum", TestE2EChecksConcurrentMaxNotSum},
		{"ChecksEveryMode", TestE2EChecksEveryMode},
		{"ChecksProbeStormSharesPing", TestE2EChecksProbeStormSharesPing},
		{"ChecksRealStdlib", TestE2EChecksRealStdlib},
		{"ChecksSecretsRedacted", TestE2EChecksSecretsRedacted},
		{"InvalidDurationsFailBeforeListening", TestE2EInvalidDurationsFailBeforeListening},
		{"LoopStopsAtSignalAndLateLoopIsRefused", TestE2ELoopStopsAtSignalAndLateLoopIsRefused},
		{"PreStopBeforeReady", TestE2EPreStopBeforeReady},
		{"SecondSIGINTExitsWhenEnabled", TestE2ESecondSIGINTExitsWhenEnabled},
		{"StartupDelay", TestE2EStartupDelay},
		{"ServerSentEventsEndCleanly", TestE2EServerSentEventsEndCleanly},
		{"RollingRestartZeroFailures", TestE2ERollingRestartZeroFailures},
		{"RolloutDemoDropsNothing", TestRolloutDemoDropsNothing},
		{"MetricsScrapedThroughTheTeardown", TestE2EMetricsScrapedThroughTheTeardown},
	} {
		t.Run(tc.name, tc.run)
	}
}
