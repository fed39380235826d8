package fallback

// MaxRules is maxRules, for the tests of package fallback_test.
const MaxRules = maxRules
