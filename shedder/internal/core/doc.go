// Package core is the decision machinery the two priority shedders share:
// the worker-utilisation Shedder of package shedder and the fleet-usage
// Shedder of package shedder/fleetshed. It decides nothing on its own; it
// holds the hysteresis gate a threshold is shed through, the Decisions a
// shedder returns, the estimator an adaptive capacity is learnt with, and
// the validation of the settings both constructors take, so that the two
// shedders behave alike where they overlap and neither depends on the
// other's transport to Redis.
//
// It imports the floodgate core and the standard library only, never
// go-redis: package shedder, which must not link go-redis, builds on it.
// Its exported names exist for those two packages; being internal, they
// are no part of floodgate's API.
package core
