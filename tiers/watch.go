package tiers

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// defaultWatchInterval is how often Watch polls the policy file unless
// WithWatchInterval says otherwise.
const defaultWatchInterval = 2 * time.Second

// WatchOption configures Watch; Watch reports every bad one before it
// polls.
type WatchOption func(*watchConfig)

type watchConfig struct {
	interval time.Duration
	onReload func(*Policy, error)
	logger   *slog.Logger
	overload *overloadHook // WithOverload (overload.go); nil: none
	errs     []error
}

// WithWatchInterval sets how often Watch polls the file (default 2s; must
// be > 0).
func WithWatchInterval(d time.Duration) WatchOption {
	return func(c *watchConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("tiers: WithWatchInterval: interval %s must be > 0", d))
			return
		}
		c.interval = d
	}
}

// WithOnReload sets a function called after every reload attempt: with the
// new policy and a nil error when it was swapped in, or with a nil policy
// and the reason when the old policy stays in force. It runs on the Watch
// goroutine. nil (the default) calls nothing.
func WithOnReload(f func(p *Policy, err error)) WatchOption {
	return func(c *watchConfig) { c.onReload = f }
}

// WithWatchLogger sets the logger reloads are reported to (default
// slog.Default(); must not be nil). Successful reloads log at Info,
// failures at Error.
func WithWatchLogger(l *slog.Logger) WatchOption {
	return func(c *watchConfig) {
		if l == nil {
			c.errs = append(c.errs, errors.New("tiers: WithWatchLogger: logger is nil"))
			return
		}
		c.logger = l
	}
}

// Watch keeps l's policy in step with the YAML file at path until ctx is
// done, and then returns ctx's error. It polls the file's content (SHA-256)
// every interval; when the content changes it loads the file and swaps the
// new policy in atomically. A file that cannot be read or does not load
// leaves the policy in force unchanged, and the failure is reported (the
// WithOnReload callback and the logger) once per distinct content, not on
// every poll.
//
// The first poll happens at once, so the file's current content is applied
// when Watch starts. A nil limiter, an empty path and bad options are
// reported, all together, before any polling.
func Watch(ctx context.Context, path string, l *Limiter, opts ...WatchOption) error {
	cfg := watchConfig{interval: defaultWatchInterval, logger: slog.Default()}
	if l == nil {
		cfg.errs = append(cfg.errs, errors.New("tiers: Watch: limiter is nil"))
	}
	if path == "" {
		cfg.errs = append(cfg.errs, errors.New("tiers: Watch: path is empty"))
	}
	for _, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, errors.New("tiers: nil WatchOption"))
			continue
		}
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return errors.Join(cfg.errs...)
	}
	w := watcher{path: path, l: l, cfg: cfg}
	w.poll()
	t := time.NewTicker(cfg.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			w.poll()
		}
	}
}

type watcher struct {
	path    string
	l       *Limiter
	cfg     watchConfig
	last    [sha256.Size]byte
	have    bool
	lastErr string
}

func (w *watcher) poll() {
	data, err := readPolicyFile(w.path)
	if err != nil {
		// Report a read failure once until it changes or the file is back.
		if err.Error() != w.lastErr {
			w.lastErr = err.Error()
			w.have = false
			w.report(nil, err)
		}
		return
	}
	sum := sha256.Sum256(data)
	if w.have && sum == w.last {
		return
	}
	w.last, w.have, w.lastErr = sum, true, ""
	p, err := Load(data)
	if err == nil && w.cfg.overload != nil {
		err = w.cfg.overload.check(p) // before anything is swapped
	}
	if err == nil {
		err = w.l.SetPolicy(p)
	}
	if err == nil && w.cfg.overload != nil {
		err = w.cfg.overload.apply(p)
	}
	if err != nil {
		w.report(nil, err)
		return
	}
	w.report(p, nil)
}

func (w *watcher) report(p *Policy, err error) {
	if err != nil {
		w.cfg.logger.Error("floodgate: policy reload failed; the previous policy stays in force", "path", w.path, "error", err)
	} else {
		w.cfg.logger.Info("floodgate: policy reloaded", "path", w.path, "rules", len(p.Rules))
	}
	if w.cfg.onReload != nil {
		w.cfg.onReload(p, err)
	}
}
