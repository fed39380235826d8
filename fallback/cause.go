package fallback

import "github.com/floodgate-go/floodgate/internal/cause"

// Keys of Stats: the causes of a failed call to the primary store, as
// counted in Stats.Causes and named in logs (and, through package otel, as
// a store call's error.type), and the Stats.ByRule entry of the rules
// beyond the first 1024.
const (
	CauseTimeout  = cause.Timeout  // the call ran out of its budget
	CauseRefused  = cause.Refused  // nothing listens: the server is down
	CauseReset    = cause.Reset    // the connection broke mid-call
	CauseNoScript = cause.NoScript // the script cache was lost and not reloaded
	CauseOOM      = cause.OOM      // Redis is out of memory (maxmemory, noeviction)
	CauseRedirect = cause.Redirect // a Redis Cluster redirect (MOVED, ASK, CLUSTERDOWN, TRYAGAIN)
	CauseOther    = cause.Other

	// OtherRule is the ByRule entry for rules beyond the first 1024.
	OtherRule = "_other"
)
