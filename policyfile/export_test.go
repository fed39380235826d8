package policyfile

// Schema is the keys the decoder accepts, by path.
var Schema = schema
