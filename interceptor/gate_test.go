package interceptor

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/seam"
)

// mustGate is the seam.Gate of fg over a, as module connectmw gets it
// (seam.NewGate).
func mustGate(t *testing.T, fg *Interceptor, a floodgate.Admitter) seam.Gate {
	t.Helper()
	g, err := seam.NewGate(fg, a)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestSeamTypes: the seam's constructors answer for an Interceptor and
// ClientOptions, and refuse other types with an error (no panic).
func TestSeamTypes(t *testing.T) {
	t.Parallel()
	if _, err := seam.NewGate(struct{}{}, &stage{}); err == nil {
		t.Error("seam.NewGate(struct{}{}) = nil error")
	}
	if _, err := seam.NewRetrier(1, 2); err == nil {
		t.Error("seam.NewRetrier(1, 2) = nil error")
	}
	if _, err := seam.NewRetrier(WithMaxAttempts(0)); err == nil || err.Error() != "interceptor: WithMaxAttempts(0): want at least 1" {
		t.Errorf("seam.NewRetrier(WithMaxAttempts(0)) = %v", err)
	}
	if _, err := seam.NewGate(MustNew(), &stage{}); err != nil {
		t.Errorf("seam.NewGate(*Interceptor) = %v", err)
	}
}

// TestCallResult: a Gate's call ends with the outcome of its gRPC code and
// the cost its handler reported.
func TestCallResult(t *testing.T) {
	t.Parallel()
	fg := MustNew()
	ctx, done, den := mustGate(t, fg, &stage{}).Admit(context.Background(), seam.Call{Method: "/x.Svc/M", RemoteAddr: "192.0.2.9:1"})
	if done == nil || den != nil {
		t.Fatal("not admitted")
	}
	done(floodgate.Ignored)
	if err := floodgate.ReportCost(ctx, 7); err != nil {
		t.Fatal(err)
	}
	for code, want := range map[codes.Code]floodgate.Outcome{
		codes.OK: floodgate.OutcomeSuccess, codes.DeadlineExceeded: floodgate.OutcomeDropped,
		codes.ResourceExhausted: floodgate.OutcomeDropped, codes.Unavailable: floodgate.OutcomeDropped,
		codes.Canceled: floodgate.OutcomeIgnored, codes.InvalidArgument: floodgate.OutcomeFailed,
		codes.Internal: floodgate.OutcomeFailed, codes.Unknown: floodgate.OutcomeFailed,
	} {
		if got := seam.CallResult(ctx, code); got != (floodgate.Result{Outcome: want, Cost: 7, HasCost: true}) {
			t.Errorf("seam.CallResult(%v) = %+v, want %v with cost 7", code, got, want)
		}
	}
}

// TestGateMessagesAndWait: AdmitMessage decides nothing without
// WithPerMessage and charges each message with it; a call a rule held
// gets its Server-Timing in the response header.
func TestGateMessagesAndWait(t *testing.T) {
	t.Parallel()
	s := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Waited: 1500 * time.Microsecond}, nil
	}}
	h := http.Header{}
	call := seam.Call{Method: "/x.Svc/Stream", ResponseHeader: func(context.Context) http.Header { return h }}
	ctx, done, _ := mustGate(t, MustNew(), s).Admit(context.Background(), call)
	if got := h.Values("Server-Timing"); len(got) != 1 || got[0] != "floodgate-wait;dur=1.5" {
		t.Errorf("Server-Timing = %q", got)
	}
	if den := mustGate(t, MustNew(), s).AdmitMessage(ctx); den != nil || s.admits.Load() != 1 {
		t.Fatalf("without WithPerMessage: %v, %d admissions", den, s.admits.Load())
	}
	done(floodgate.Ignored)

	deny := false
	s.decide = func(*floodgate.Request) (floodgate.Decision, error) {
		if deny {
			return floodgate.Decision{Stage: floodgate.StageConcurrency, Limit: 4}, nil
		}
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency}, nil
	}
	g := mustGate(t, MustNew(WithPerMessage()), s)
	ctx, done, _ = g.Admit(context.Background(), seam.Call{Method: "/x.Svc/Stream"})
	if den := g.AdmitMessage(ctx); den != nil {
		t.Fatal(den.Status)
	}
	deny = true
	den := g.AdmitMessage(ctx)
	if den == nil || den.Status.Code() != codes.ResourceExhausted || den.Pushback != "-1" {
		t.Fatalf("denied message: %+v", den)
	}
	done(floodgate.Ignored)
	if got := s.finished(); len(got) != 3 || got[1].Outcome != floodgate.OutcomeIgnored {
		t.Fatalf("results %+v: the admitted message is released at once, ignored", got)
	}
}

// TestRetrier: Do retries as UnaryClient does, on fake time: the
// pushback plus jitter, at most WithMaxAttempts attempts, never for a
// delay the server did not give or past the deadline.
func TestRetrier(t *testing.T) {
	t.Parallel()
	var slept []time.Duration
	r, err := seam.NewRetrier(WithMaxAttempts(3), WithRand(func() float64 { return 0.5 }),
		WithSleep(func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	shed := status.Error(codes.Unavailable, "shed")
	pushback := metadata.Pairs(PushbackTrailer, "100")
	n := 0
	err = r.Do(context.Background(), func() (metadata.MD, error) { n++; return pushback, shed })
	if !errors.Is(err, shed) || n != 3 || len(slept) != 2 || slept[0] != 110*time.Millisecond || slept[1] != 110*time.Millisecond {
		t.Fatalf("Do: %v after %d attempts, slept %v; want 3 attempts, 2 waits of 110ms (100ms + 0.2*0.5 jitter)", err, n, slept)
	}
	n, slept = 0, nil
	err = r.Do(context.Background(), func() (metadata.MD, error) {
		n++
		if n == 2 {
			return nil, nil
		}
		return pushback, shed
	})
	if err != nil || n != 2 || len(slept) != 1 {
		t.Fatalf("Do: %v after %d attempts, slept %v", err, n, slept)
	}
	for name, attempt := range map[string]func() (metadata.MD, error){
		"no delay":     func() (metadata.MD, error) { return nil, shed },
		"do not retry": func() (metadata.MD, error) { return metadata.Pairs(PushbackTrailer, "-1"), shed },
		"other code":   func() (metadata.MD, error) { return pushback, status.Error(codes.InvalidArgument, "bad") },
	} {
		n, slept = 0, nil
		if err := r.Do(context.Background(), func() (metadata.MD, error) { n++; return attempt() }); err == nil || n != 1 || slept != nil {
			t.Errorf("%s: %v after %d attempts, slept %v; want 1 attempt", name, err, n, slept)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	n, slept = 0, nil
	if err := r.Do(ctx, func() (metadata.MD, error) { n++; return pushback, shed }); err == nil || n != 1 || slept != nil {
		t.Errorf("past the deadline: %v after %d attempts, slept %v; want 1 attempt", err, n, slept)
	}
	if err := r.Open(); err != nil {
		t.Errorf("Open without a throttle: %v", err)
	}
}
