package policyfile

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/internal/yamldoc"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
	"github.com/floodgate-go/floodgate/tiers"
)

// defaultInterval is how often Watch polls the file unless WithInterval
// says otherwise.
const defaultInterval = 2 * time.Second

// Targets are what Watch applies a policy file to. Limits is required;
// every other field is a stage the service may not run. A file whose
// section (or key) sets a stage that Targets leaves nil is refused, as
// any other mistake: a setting nothing applies never goes unnoticed.
type Targets struct {
	// Limits takes the rate-limit sections (Limiter.SetPolicy).
	Limits *tiers.Limiter
	// Shedder takes the shedder: section's capacity, thresholds and
	// adaptive keys.
	Shedder *shedder.Shedder
	// Fleet takes shedder: fleet:.
	Fleet *fleetshed.Shedder
	// Concurrency takes concurrency: global: (it must be built
	// WithGlobal for it), wait: and per_key: (the caps it was built
	// with, by name).
	Concurrency *concurrency.Limiter
	// Adaptive takes concurrency: adaptive:.
	Adaptive *concurrency.Adaptive
	// Identity is the identity: section the transport was built with
	// (an empty one when the file had none): a transport builds its
	// extractors once, so a reload whose identity: differs is refused,
	// and nil refuses any identity: section.
	Identity *Identity
	// Outbound takes the outbound: section's rate limits
	// (Limiter.SetPolicy with File.Outbound; a file without the section
	// sets a policy without rules). Its cooldown: settings are package
	// guard's, which applies them from WithOnReload.
	Outbound *tiers.Limiter
}

// Option configures Watch; Watch reports every bad one before it polls.
type Option func(*config)

type config struct {
	interval time.Duration
	onReload func(*File, error)
	logger   *slog.Logger
	errs     []error
}

// WithInterval sets how often Watch polls the file (default 2s; must be
// > 0).
func WithInterval(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("policyfile: WithInterval: interval %s must be > 0", d))
			return
		}
		c.interval = d
	}
}

// WithOnReload sets a function called after every reload attempt: with
// the new File and a nil error when it was applied, or with a nil File
// and the reason when the old one stays in force. It runs on the Watch
// goroutine. nil (the default) calls nothing.
func WithOnReload(f func(f *File, err error)) Option {
	return func(c *config) { c.onReload = f }
}

// WithLogger sets the logger reloads are reported to (default
// slog.Default(); must not be nil). Successful reloads log at Info,
// failures at Error.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.errs = append(c.errs, errors.New("policyfile: WithLogger: logger is nil"))
			return
		}
		c.logger = l
	}
}

// Watch keeps t in step with the policy file at path until ctx is done,
// and then returns ctx's error. It polls the file's content (SHA-256)
// every interval; a changed content is acted on only once two
// consecutive polls have read it the same, so a file written in place
// (truncated, then written) is never loaded half-written: a prefix that
// happens to be a valid policy (cut after a rule) is not applied when the
// rest arrives before the next poll. A content that settles is then
// loaded, every section is checked against the stage of t it sets, and
// only then are the rate limits swapped in (atomically) and the other
// sections applied. A file that cannot be read, does not load, or sets a
// stage that t lacks or that would refuse it, changes nothing: the rate
// limits and every stage stay as they were, and the failure is reported
// (the WithOnReload callback and the logger) once per distinct content,
// not on every poll. A read failure is reported at the poll that meets
// it.
//
// So a change takes effect one to two intervals after it is written. A
// writer that pauses mid-write for longer than an interval can still be
// read half-written on two polls; replacing the file in one rename, as
// deploy tools and Kubernetes ConfigMap volumes do, never exposes a
// partial file.
//
// A stage whose section (or key) the file leaves out returns to the
// settings it had when Watch started: the file, when it says something,
// is the truth, and the Go configuration otherwise.
//
// The first poll happens at once and the second one interval later, so
// the file's content when Watch starts is applied one interval after it
// (the configuration the service was built with decides until then). A
// nil t.Limits, an empty path and bad options are reported, all together,
// before any polling.
func Watch(ctx context.Context, path string, t Targets, opts ...Option) error {
	w, err := newWatcher(path, t, opts)
	if err != nil {
		return err
	}
	w.poll()
	tick := time.NewTicker(w.cfg.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			w.poll()
		}
	}
}

// newWatcher checks Watch's arguments and returns the watcher that polls
// path for t, before any poll.
func newWatcher(path string, t Targets, opts []Option) (*watcher, error) {
	cfg := config{interval: defaultInterval, logger: slog.Default()}
	if t.Limits == nil {
		cfg.errs = append(cfg.errs, errors.New("policyfile: Watch: Targets.Limits is nil"))
	}
	if path == "" {
		cfg.errs = append(cfg.errs, errors.New("policyfile: Watch: path is empty"))
	}
	for _, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, errors.New("policyfile: nil Option"))
			continue
		}
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	return &watcher{path: path, t: t, cfg: cfg, base: capture(t)}, nil
}

// watcher is the state of one Watch between polls.
type watcher struct {
	path string
	t    Targets
	cfg  config
	base base
	// last is the content last acted on (applied, or reported as
	// failing); have says there is one.
	last [sha256.Size]byte
	have bool
	// seen is the content the previous poll read when it differed from
	// last: it is acted on when the next poll reads it again. seenOK says
	// there is one.
	seen    [sha256.Size]byte
	seenOK  bool
	lastErr string
}

// poll reads the file once and acts on its content when the previous poll
// read the same and it differs from the content last acted on.
func (w *watcher) poll() {
	data, err := yamldoc.ReadFile("policyfile", w.path)
	if err != nil {
		w.seenOK = false
		// Report a read failure once until it changes or the file is back.
		if err.Error() != w.lastErr {
			w.lastErr = err.Error()
			w.have = false
			w.report(nil, err)
		}
		return
	}
	w.lastErr = ""
	sum := sha256.Sum256(data)
	if w.have && sum == w.last {
		w.seenOK = false // back to the content in force: nothing to do
		return
	}
	if !w.seenOK || sum != w.seen {
		// Changed since the last poll: it may be half-written. Act on
		// it once the next poll reads it the same.
		w.seen, w.seenOK = sum, true
		return
	}
	w.seenOK = false
	w.last, w.have = sum, true
	f, err := Load(data)
	if err == nil {
		err = check(w.t, f) // before anything is swapped
	}
	if err == nil && w.t.Outbound != nil {
		err = w.t.Outbound.SetPolicy(f.OutboundLimits())
	}
	if err == nil {
		err = w.t.Limits.SetPolicy(f.Limits)
	}
	if err == nil {
		err = apply(w.t, f, w.base)
	}
	if err != nil {
		w.report(nil, err)
		return
	}
	w.report(f, nil)
}

func (w *watcher) report(f *File, err error) {
	if err != nil {
		w.cfg.logger.Error("floodgate: policy reload failed; the previous policy stays in force", "path", w.path, "error", err)
	} else {
		w.cfg.logger.Info("floodgate: policy reloaded", "path", w.path, "rules", len(f.Limits.Rules))
	}
	if w.cfg.onReload != nil {
		w.cfg.onReload(f, err)
	}
}
