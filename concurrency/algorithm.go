package concurrency

import "math"

// algState is what an algorithm learns across windows.
type algState struct {
	long       float64 // Gradient2: long-run latency, seconds; 0 before the first window
	noload     float64 // Vegas: least window latency since the last probe, seconds; 0 = none
	sinceProbe int     // Vegas: windows since the no-load latency was last reset
}

// update returns the new (unclamped) limit after a window with stats st,
// the limit being est. The rules are the package documentation's.
func (s *algState) update(cfg *AdaptiveConfig, est float64, st windowStats) float64 {
	switch cfg.Algorithm {
	case Vegas:
		return s.vegas(cfg, est, st)
	case AIMD:
		return aimd(cfg, est, st)
	}
	return s.gradient2(cfg, est, st)
}

// appLimited reports whether the window never used half the limit: the
// service is not limited by concurrency and the window says nothing of
// where the limit should be.
func appLimited(est float64, st windowStats) bool { return float64(st.maxInflight)*2 < est }

func (s *algState) gradient2(cfg *AdaptiveConfig, est float64, st windowStats) float64 {
	if st.drops > 0 {
		return est * cfg.Backoff
	}
	short := st.rtt
	if short <= 0 {
		return est
	}
	if s.long == 0 || short < s.long/2 {
		s.long = short // first window, or the overload passed: recover at once
	} else {
		s.long += (short - s.long) / float64(cfg.LongWindow)
	}
	if appLimited(est, st) {
		return est
	}
	gradient := math.Max(0.5, math.Min(1, cfg.Tolerance*s.long/short))
	target := est*gradient + math.Sqrt(est)
	return est*(1-cfg.Smoothing) + target*cfg.Smoothing
}

func (s *algState) vegas(cfg *AdaptiveConfig, est float64, st windowStats) float64 {
	if st.drops > 0 {
		return est * cfg.Backoff
	}
	rtt := st.rtt
	if rtt <= 0 {
		return est
	}
	s.sinceProbe++
	if s.noload == 0 || rtt < s.noload || s.sinceProbe >= cfg.ProbeEvery {
		s.noload, s.sinceProbe = rtt, 0
		return est
	}
	if appLimited(est, st) {
		return est
	}
	queue := math.Ceil(est * (1 - s.noload/rtt))
	lg := math.Max(1, math.Log10(est))
	switch {
	case queue <= lg:
		return est + cfg.Beta*lg // no queue at all: grow fast
	case queue < cfg.Alpha*lg:
		return est + lg
	case queue > cfg.Beta*lg:
		return est - lg
	}
	return est
}

func aimd(cfg *AdaptiveConfig, est float64, st windowStats) float64 {
	if st.drops > 0 || (cfg.Timeout > 0 && st.rtt > cfg.Timeout.Seconds()) {
		return est * cfg.Backoff
	}
	if st.samples == 0 || appLimited(est, st) {
		return est
	}
	return est + 1
}
