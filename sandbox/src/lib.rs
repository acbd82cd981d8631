//! loopexec-sandbox: launches one command in a zone described by a policy.
