package ldfasthttp

// RequestPath is requestPath, for the tests of the external test package.
var RequestPath = requestPath
