package policyfile

// Schema is the keys the decoder accepts, by path.
var Schema = schema

var FreeForm = freeForm

// NewPoller returns the polls of a Watch of path for t with opts, for a
// test to run one at a time instead of on Watch's ticker; it reports the
// errors Watch reports before polling.
func NewPoller(path string, t Targets, opts ...Option) (poll func(), err error) {
	w, err := newWatcher(path, t, opts)
	if err != nil {
		return nil, err
	}
	return w.poll, nil
}
