// Command llm is a fake LLM completion API whose tenants have a plan
// priced per meter: a budget of input (prompt) tokens and one of output
// (generated) tokens. A request is admitted on an estimate of each (its
// prompt's bytes, its max_tokens) and, once the completion is done, the
// handler reports how many tokens it really read and generated with
// floodgate.ReportMeter, and each budget is settled with its own meter's
// count. A per-tenant request rate shapes bursts (max_wait) instead of
// failing them.
//
//	cd examples && go run ./llm
//	curl -i -H 'X-Tenant: acme' -d '{"prompt":"write a haiku about queues","max_tokens":256}' http://127.0.0.1:8081/v1/complete
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

//go:embed policy.yaml
var defaultPolicy []byte

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "llm example:", err)
		os.Exit(1)
	}
}

// run serves the API until ctx ends.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("llm", flag.ContinueOnError)
	fs.SetOutput(stdout)
	addr := fs.String("addr", "127.0.0.1:8081", "address the API listens on")
	policyPath := fs.String("policy", "", "rate-limit policy (default: the embedded llm/policy.yaml)")
	redisURL := fs.String("redis", os.Getenv("REDIS_URL"), "Redis URL for budgets shared by every instance (default $REDIS_URL; empty: in process)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	policy, err := loadPolicy(*policyPath)
	if err != nil {
		return err
	}
	store, storeName, closeStore, err := newStore(*redisURL)
	if err != nil {
		return err
	}
	defer closeStore()
	h, err := newHandler(store, policy, floodgate.SystemClock())
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "llm example listening on http://%s\n  store: %s\n", ln.Addr(), storeName)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func loadPolicy(path string) (*tiers.Policy, error) {
	if path != "" {
		f, err := policyfile.LoadFile(path) // every error names its line
		if err != nil {
			return nil, err
		}
		return f.Limits, nil
	}
	return tiers.Load(defaultPolicy)
}

// newStore keeps the budgets in process, or in Redis behind the circuit
// breaker's local fallback when url is set.
func newStore(url string) (quota.Store, string, func(), error) {
	if url == "" {
		s, err := memstore.New()
		return s, "in process", func() {}, err
	}
	client, err := redisstore.NewClient(url)
	if err != nil {
		return nil, "", nil, err
	}
	rs, err := redisstore.New(client)
	if err != nil {
		client.Close()
		return nil, "", nil, err
	}
	// One process here; replicas pass the live count of package fleet
	// (*fleet.Members).Count, or use package guard, which does.
	fs, err := fallback.New(rs, fallback.WithTimeout(25*time.Millisecond), fallback.WithInstances(func() int { return 1 }))
	if err != nil {
		rs.Close()
		client.Close()
		return nil, "", nil, err
	}
	closeAll := func() {
		// The fallback first: it hands the units it admitted locally
		// while Redis was away over to Redis, within 2s; then the store
		// and the client it went through.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := fs.Close(ctx); err != nil {
			slog.Warn("llm example: the fallback hand-over at exit", "error", err)
		}
		rs.Close()
		client.Close()
	}
	return fs, "redis " + url, closeAll, nil
}

// Route is the completion endpoint's route pattern, the method the policy
// and the interceptor name it by.
const Route = "POST /v1/complete"

// MaxRequestBody bounds a completion request's body.
const MaxRequestBody = 64 << 10

// newHandler is the API: the completion endpoint behind the rate-limit
// stage over store, waiting on clk (tests pass a fake one).
func newHandler(store quota.Store, policy *tiers.Policy, clk floodgate.Clock) (http.Handler, error) {
	limits, err := tiers.NewLimiter(store, policy, tiers.WithClock(clk))
	if err != nil {
		return nil, err
	}
	fg, err := interceptor.New(
		// An auth proxy in front sets X-Tenant and strips the client's.
		interceptor.WithTenant(interceptor.FromHeader("X-Tenant")),
		// The estimates charged at admission: the prompt's bytes and
		// the request's max_tokens, read from its body (which is put
		// back for the handler).
		interceptor.WithCost(estimate),
	)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(Route, fg.HTTP(limits)(http.HandlerFunc(complete)))
	return mux, nil
}

// completionRequest is the body of POST /v1/complete.
type completionRequest struct {
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
}

// completionResponse is its answer.
type completionResponse struct {
	Completion string `json:"completion"`
	Usage      struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

// The meters the policy's token rules charge (their meter:).
const (
	InputTokens  = "input_tokens"
	OutputTokens = "output_tokens"
)

// readRequest decodes r's body and puts it back, so the estimate and the
// handler can both read it.
func readRequest(r *http.Request) (completionRequest, error) {
	var req completionRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBody+1))
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return req, err
	}
	if len(body) > MaxRequestBody {
		return req, fmt.Errorf("body is larger than %d bytes", MaxRequestBody)
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, err
	}
	if req.MaxTokens < 1 {
		return req, errors.New("max_tokens must be at least 1")
	}
	return req, nil
}

// estimate is the WithCost func. It estimates each meter by reporting it
// on the request's context before admission: input tokens, the prompt's
// bytes (a token is at least one byte); output tokens, the completion's
// max_tokens. A request the handler will refuse reports nothing (each
// token rule then charges 1). It returns 0: the request's own cost (the
// default meter) stays unset, and tenant-requests has cost 1.
func estimate(ctx context.Context, _ string, md interceptor.Metadata) int64 {
	r := md.HTTPRequest()
	if r == nil {
		return 0
	}
	req, err := readRequest(r)
	if err != nil {
		return 0
	}
	for _, err := range []error{
		floodgate.ReportMeter(ctx, InputTokens, int64(len(req.Prompt))),
		floodgate.ReportMeter(ctx, OutputTokens, req.MaxTokens),
	} {
		if err != nil {
			slog.Warn("llm example: estimating the tokens", "error", err)
		}
	}
	return 0
}

// complete is the fake model: it reads InputTokens(prompt) tokens and
// "generates" Tokens(prompt, max_tokens), and reports both counts, each
// for its meter.
func complete(w http.ResponseWriter, r *http.Request) {
	req, err := readRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		// Nothing read or generated: refund the estimates.
		_ = floodgate.ReportMeter(r.Context(), InputTokens, 0)
		_ = floodgate.ReportMeter(r.Context(), OutputTokens, 0)
		return
	}
	var resp completionResponse
	resp.Usage.InputTokens = PromptTokens(req.Prompt)
	resp.Usage.OutputTokens = Tokens(req.Prompt, req.MaxTokens)
	resp.Completion = strings.Repeat("tok ", int(resp.Usage.OutputTokens))
	for _, err := range []error{
		floodgate.ReportMeter(r.Context(), InputTokens, resp.Usage.InputTokens),
		floodgate.ReportMeter(r.Context(), OutputTokens, resp.Usage.OutputTokens),
	} {
		if err != nil {
			slog.Warn("llm example: reporting the tokens", "error", err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// PromptTokens is how many tokens the fake model reads of prompt: one per
// four bytes, at least one, never more than the prompt's bytes (the
// estimate) for a prompt that is not empty.
func PromptTokens(prompt string) int64 {
	return 1 + int64(len(prompt))/4
}

// Tokens is how many tokens the fake model generates for prompt: a
// deterministic count between 1 and maxTokens that varies with the prompt,
// as a real model's output length does.
func Tokens(prompt string, maxTokens int64) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(prompt); i++ {
		h = (h ^ uint64(prompt[i])) * 1099511628211
	}
	return 1 + int64(h%uint64(maxTokens))
}
