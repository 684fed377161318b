package shard

import (
	"context"
	"log/slog"
	"strings"
)

// logWriter turns memberlist's log lines ("[WARN] memberlist: ...") into
// slog records at the matching level.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, l := range []struct {
		prefix string
		level  slog.Level
	}{
		{"[DEBUG]", slog.LevelDebug},
		{"[INFO]", slog.LevelInfo},
		{"[WARN]", slog.LevelWarn},
		{"[ERR]", slog.LevelError},
		{"[ERROR]", slog.LevelError},
	} {
		if rest, ok := strings.CutPrefix(s, l.prefix); ok {
			s, level = strings.TrimSpace(rest), l.level
			break
		}
	}
	w.log.Log(context.Background(), level, s)
	return len(p), nil
}
