package serve

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// drainNoticeEvery is how often a drain that is still waiting says how many
// requests are left and how much of the grace.
const drainNoticeEvery = 5 * time.Second

// drainHTTP stops accepting connections and lets the requests in flight
// finish for up to grace, saying how many there are, how long they have and
// that a second Ctrl-C (or SIGTERM) stops waiting; it then repeats the count
// and the time left every drainNoticeEvery. A second signal, or the end of
// the grace, closes what is left at once. inFlight reads the current count.
// stopSignals ends the caller's own handling of the first signal once this
// one's is in place; this one ends with the drain, so a third Ctrl-C kills
// the process the default way.
func drainHTTP(srv *http.Server, grace time.Duration, stopSignals func(), inFlight func() int, log *slog.Logger) {
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	stopSignals()

	n := inFlight()
	if n == 0 {
		log.Info("shutting down: no requests in flight")
	} else {
		log.Info(fmt.Sprintf("shutting down: draining %s, up to %s; press Ctrl-C again to stop now",
			requests(n), grace.Round(time.Second)), "in_flight", n, "grace", grace)
	}
	deadline := time.Now().Add(grace)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	tick := time.NewTicker(drainNoticeEvery)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				if left := inFlight(); left > 0 {
					log.Warn(fmt.Sprintf("drain timeout (%s) reached: closing %s still in flight", grace, requests(left)),
						"in_flight", left)
				}
				srv.Close()
			}
			return
		case <-tick.C:
			if left := inFlight(); left > 0 {
				log.Info(fmt.Sprintf("draining: %s in flight, %s to go; Ctrl-C again to stop now", requests(left),
					time.Until(deadline).Round(time.Second)), "in_flight", left)
			}
		case <-again:
			left := inFlight()
			log.Warn(fmt.Sprintf("second interrupt: closing %s now", requests(left)), "in_flight", left)
			srv.Close()
			cancel()
			<-done
			return
		}
	}
}

// requests is "1 request" or "N requests".
func requests(n int) string {
	if n == 1 {
		return "1 request"
	}
	return fmt.Sprintf("%d requests", n)
}
