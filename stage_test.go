package floodgate_test

import (
	"context"
	"slices"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// TestStageSemantics pins what a deny of each kind of stage means on the
// wire and in telemetry: the transports read these values and nothing
// else, so a change here is a change of every wire format.
func TestStageSemantics(t *testing.T) {
	const (
		quota   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
		reduced = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
		title   = "Request cannot be satisfied as assigned quota has been exceeded"
	)
	rate := floodgate.Semantics{Label: "limited", GRPCCode: 8, Reason: "RATE_LIMIT_EXCEEDED", HTTPStatus: 429,
		ProblemType: quota, ProblemTitle: title, Message: "rate limit exceeded", Quota: "rate limit"}
	for _, tc := range []struct {
		stage floodgate.Stage
		want  floodgate.Semantics
	}{
		{floodgate.StageShedder, floodgate.Semantics{Label: "shed", GRPCCode: 14, Reason: "LOAD_SHED", HTTPStatus: 503,
			ProblemType: reduced, ProblemTitle: "Service temporarily has reduced capacity", Message: "server overloaded: request shed"}},
		{floodgate.StageConcurrency, floodgate.Semantics{Label: "concurrency_limited", GRPCCode: 8, Reason: "CONCURRENCY_LIMIT_EXCEEDED", HTTPStatus: 429,
			ProblemType: quota, ProblemTitle: title, Message: "concurrency limit exceeded", Quota: "concurrency limit", InFlight: true}},
		{floodgate.StageTiers, rate},
		{"", rate},
		{"custom", rate},
	} {
		if got := tc.stage.Semantics(); got != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.stage, got, tc.want)
		}
	}
	want := []floodgate.Stage{floodgate.StageShedder, floodgate.StageConcurrency, floodgate.StageTiers}
	if got := floodgate.Stages(); !slices.Equal(got, want) {
		t.Errorf("Stages() = %q, want %q", got, want)
	}
	floodgate.Stages()[0] = "changed"
	if floodgate.Stages()[0] != floodgate.StageShedder {
		t.Error("Stages returned the table itself")
	}
}

func TestDecisionLabel(t *testing.T) {
	for _, c := range []struct {
		d    floodgate.Decision
		want string
	}{
		{floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder}, "allowed"},
		{floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Shadow: true}, "allowed"},
		{floodgate.Decision{Stage: floodgate.StageTiers}, "limited"},
		{floodgate.Decision{Stage: floodgate.StageTiers, Source: floodgate.SourceCache}, "limited"},
		{floodgate.Decision{Stage: floodgate.StageShedder}, "shed"},
		{floodgate.Decision{Stage: floodgate.StageConcurrency}, "concurrency_limited"},
		{floodgate.Decision{Stage: "custom"}, "limited"},
	} {
		if got := c.d.Label(); got != c.want {
			t.Errorf("Label(%+v) = %q, want %q", c.d, got, c.want)
		}
	}
}

// named is a capability a stage may offer.
type named interface{ Name() string }

type leaf struct{ name string }

func (l leaf) Admit(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	return floodgate.Decision{Allowed: true}, nil, nil
}
func (l leaf) Name() string { return l.name }

type plain struct{}

func (plain) Admit(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	return floodgate.Decision{Allowed: true}, nil, nil
}

// wrap follows the unwrap convention and offers nothing itself.
type wrap struct{ floodgate.Admitter }

func (w wrap) Unwrap() floodgate.Admitter { return w.Admitter }

// override follows the convention and offers Name itself.
type override struct{ wrap }

func (override) Name() string { return "override" }

func TestAsAll(t *testing.T) {
	names := func(a floodgate.Admitter) []string {
		var out []string
		for n := range floodgate.All[named](a) {
			out = append(out, n.Name())
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		a     floodgate.Admitter
		want  []string
		first string
	}{
		{"stage", leaf{"a"}, []string{"a"}, "a"},
		{"none", plain{}, nil, ""},
		{"nil", nil, nil, ""},
		{"wrapped twice", wrap{wrap{leaf{"a"}}}, []string{"a"}, "a"},
		{"wrapper around a nil stage", wrap{}, nil, ""},
		{"chain", floodgate.Chain{plain{}, leaf{"a"}, wrap{leaf{"b"}}}, []string{"a", "b"}, "a"},
		{"wrapped chain", wrap{floodgate.Chain{leaf{"a"}, floodgate.Chain{wrap{leaf{"b"}}}}}, []string{"a", "b"}, "a"},
		{"wrapper overrides", override{wrap{leaf{"a"}}}, []string{"override"}, "override"},
		{"stage hidden by a wrapper without Unwrap", struct{ floodgate.Admitter }{leaf{"a"}}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(tc.a); !slices.Equal(got, tc.want) {
				t.Errorf("All: %q, want %q", got, tc.want)
			}
			n, ok := floodgate.As[named](tc.a)
			if ok != (tc.first != "") || ok && n.Name() != tc.first {
				t.Errorf("As: %v %v, want %q", n, ok, tc.first)
			}
		})
	}
	// All stops when its loop does.
	for range floodgate.All[named](floodgate.Chain{leaf{"a"}, leaf{"b"}}) {
		break
	}
}
