package ldfasthttp

// Path is requestPath, for the tests of the external test package.
var Path = requestPath
