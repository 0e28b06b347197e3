package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/lameduck/lameduck"
)

// serveEcho is a WebSocket echo. Every message bumps the idle drain's clock
// (a subscription in use keeps the pod alive); when the lame-duck window
// ends the server closes with 1001 going away, so the client reconnects
// elsewhere instead of seeing 1006.
func serveEcho(lc *lameduck.Lifecycle, log *slog.Logger, w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept has answered
	}
	defer c.CloseNow()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-lc.Events().WindowEnded.Done():
			// Close waits for the client's close frame; lameduck force-closes
			// the connection at the teardown budget if it never comes.
			if err := c.Close(websocket.StatusGoingAway, "server shutting down"); err != nil {
				log.Info("demo: websocket close handshake incomplete", "error", err.Error())
			}
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		lc.KeepAlive()
		if err := c.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}

// serveEvents streams a server-sent event every 100ms and, when the window
// ends, a final "bye" event before it returns, so the client sees a clean
// end of stream.
func serveEvents(lc *lameduck.Lifecycle, w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	eventLoop(lc, r.Context().Done(), func(ev string) error {
		if _, err := io.WriteString(w, ev); err != nil {
			return err
		}
		return rc.Flush()
	})
}

// eventLoop is /events on any server: it sends an event every 100ms until
// the window ends, then a final "bye" event; it returns then, when send
// fails, or when done is closed (the client left).
func eventLoop(lc *lameduck.Lifecycle, done <-chan struct{}, send func(event string) error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := 1; ; n++ {
		if err := send(fmt.Sprintf("id: %d\ndata: tick %d\n\n", n, n)); err != nil {
			return
		}
		select {
		case <-tick.C:
		case <-lc.Events().WindowEnded.Done():
			_ = send("event: bye\ndata: server shutting down; reconnect\n\n")
			return
		case <-done:
			return
		}
	}
}
