package main

import (
	"log/slog"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifySystemd tells the service manager that started serve with
// Type=notify (deploy/systemd/hourglass.service) the server's state:
// daemon.SdNotifyReady once /readyz answers 200, daemon.SdNotifyStopping
// when shutdown begins. Without $NOTIFY_SOCKET it does nothing.
func notifySystemd(log *slog.Logger, state string) {
	sent, err := daemon.SdNotify(false, state)
	switch {
	case err != nil:
		log.Warn("telling systemd the server's state failed", "state", state, "err", err)
	case sent:
		log.Debug("told systemd the server's state", "state", state)
	}
}
