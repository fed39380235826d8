package demo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/demo"
	"github.com/floodgate-go/floodgate/policyfile"
)

// TestEmbeddedPolicyIsValid: the policy loads as package guard loads it,
// rules and the shedder:, concurrency: and identity: sections.
func TestEmbeddedPolicyIsValid(t *testing.T) {
	if _, err := policyfile.Load(demo.Policy); err != nil {
		t.Fatalf("demo policy: %v", err)
	}
}

func TestDemoRejectsBadConfig(t *testing.T) {
	_, err := demo.Run(context.Background(), demo.Config{Duration: 10 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "shorter than 1s") {
		t.Errorf("short duration: err = %v", err)
	}
	_, err = demo.Run(context.Background(), demo.Config{Duration: time.Second, RedisURL: "mysql://nope"})
	if err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
		t.Errorf("bad URL: err = %v", err)
	}
}
