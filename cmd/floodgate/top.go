package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// topTimeout bounds one read of the endpoint.
const topTimeout = 5 * time.Second

// topReply is the JSON of guard.Guard.TopDeniedHandler.
type topReply struct {
	IntervalSeconds float64 `json:"interval_seconds"`
	CoveredSeconds  float64 `json:"covered_seconds"`
	Rules           []struct {
		Rule   string `json:"rule"`
		Denied uint64 `json:"denied"`
	} `json:"rules"`
	Top []struct {
		Rule      string `json:"rule"`
		Principal string `json:"principal"`
		Denied    uint64 `json:"denied"`
		Error     uint64 `json:"error"`
	} `json:"top"`
	Dropped uint64 `json:"dropped"`
}

// topFlags are top's flags, checked.
type topFlags struct {
	url   *url.URL
	watch time.Duration
}

func runTop(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return top(ctx, args, stdout, stderr)
}

// top is runTop on ctx, which ends a -watch.
func top(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, code := parseTop(args, stderr)
	if code >= 0 {
		return code
	}
	client := &http.Client{Timeout: topTimeout}
	for {
		reply, err := fetchTop(ctx, client, f.url)
		if err != nil {
			if f.watch > 0 && ctx.Err() != nil {
				return 0
			}
			fmt.Fprintf(stderr, "floodgate top: %v\n", err)
			return 1
		}
		if f.watch > 0 {
			fmt.Fprintf(stdout, "--- %s\n", time.Now().Format(time.TimeOnly))
		}
		writeTop(stdout, reply)
		if f.watch == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(f.watch):
		}
	}
}

func parseTop(args []string, stderr io.Writer) (topFlags, int) {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rawURL := fs.String("url", "", "the service's denial endpoint, guard.Guard.TopDeniedHandler (required): http://HOST:PORT/PATH")
	rule := fs.String("rule", "", "only this rule (or per-key cap); default every rule with denials")
	n := fs.Int("n", 10, "the most principals shown per rule, 1 to 64")
	watch := fs.Duration("watch", 0, "read again every interval (at least 100ms) until interrupted; 0 reads once")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: floodgate top -url http://HOST:PORT/PATH [-rule NAME] [-n 10] [-watch 2s]\n\n"+
			"Prints the principals (users, tenants, API keys hashed, client addresses) each rule denied most over\n"+
			"the last minute, read from a service's denial endpoint (guard.Guard.TopDeniedHandler).\n\n")
		fs.PrintDefaults()
	}
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return topFlags{}, 0
	case err != nil:
		return topFlags{}, 2
	}
	fail := func(format string, a ...any) (topFlags, int) {
		fmt.Fprintf(stderr, "floodgate top: "+format+"\n", a...)
		return topFlags{}, 2
	}
	switch {
	case fs.NArg() > 0:
		return fail("unexpected argument %q", fs.Arg(0))
	case *rawURL == "":
		return fail("-url is required: the service's denial endpoint (guard.Guard.TopDeniedHandler), http://HOST:PORT/PATH")
	case *n < 1 || *n > 64:
		return fail("-n %d must be from 1 to 64", *n)
	case *watch < 0 || (*watch > 0 && *watch < 100*time.Millisecond):
		return fail("-watch %s must be 0 (read once) or at least 100ms", *watch)
	}
	u, err := url.Parse(*rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fail("-url %q is not an http:// or https:// URL with a host", *rawURL)
	}
	q := u.Query()
	q.Set("n", strconv.Itoa(*n))
	if *rule != "" {
		q.Set("rule", *rule)
	}
	u.RawQuery = q.Encode()
	return topFlags{url: u, watch: *watch}, -1
}

// fetchTop reads the endpoint once.
func fetchTop(ctx context.Context, client *http.Client, u *url.URL) (*topReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u.Redacted(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", u.Redacted(), resp.Status, strings.TrimSpace(string(body)))
	}
	var reply topReply
	if err := json.Unmarshal(body, &reply); err != nil {
		return nil, fmt.Errorf("%s: not a denial endpoint's reply (guard.Guard.TopDeniedHandler): %w", u.Redacted(), err)
	}
	return &reply, nil
}

// writeTop prints the reply: a line on what it covers, then one row per
// principal, by rule, the rules with the most denials first.
func writeTop(w io.Writer, r *topReply) {
	fmt.Fprintf(w, "denials over the last %s (interval %s)", time.Duration(r.CoveredSeconds*float64(time.Second)).Round(time.Second),
		time.Duration(r.IntervalSeconds*float64(time.Second)))
	if r.Dropped > 0 {
		fmt.Fprintf(w, "; %d denials of rules beyond the summary's 64 not counted", r.Dropped)
	}
	fmt.Fprintln(w)
	if len(r.Rules) == 0 {
		fmt.Fprintln(w, "no denials")
		return
	}
	total := map[string]uint64{}
	for _, rule := range r.Rules {
		total[rule.Rule] = rule.Denied
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tPRINCIPAL\tDENIED\tERROR\tOF RULE")
	for _, e := range r.Top {
		share := "-"
		if t := total[e.Rule]; t > 0 {
			share = fmt.Sprintf("%.0f%%", 100*float64(e.Denied)/float64(t))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t±%d\t%s\n", printable(e.Rule), printable(e.Principal), e.Denied, e.Error, share)
	}
	tw.Flush()
}

// printable quotes s when it holds what a terminal would not print
// (control characters, escapes): the endpoint's values are escaped
// already, but the reply could come from anything.
func printable(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}
