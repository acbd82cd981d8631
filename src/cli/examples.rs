//! The `Examples:` section of every command's `--help` (and so of its manual page and of
//! docs/commands.md). Each example line is `  loopexec COMMAND ...` with an optional `# comment`;
//! a unit test parses every one of them with the real clap definitions, so an example cannot
//! name a flag the binary does not have. `<RUN_ID>`-style placeholders stand for a value the
//! operator fills in.

pub const INIT: &str = "\
Examples:
  loopexec init --check 'cargo test' --exec './agent --task TASK.md'   # and a key on first use
  loopexec init --check 'pytest -q' --exec 'aider --yes --message-file TASK.md'
  loopexec init --workdir ../other-repo --check 'make test' --exec './agent' --no-keygen";

pub const RUN: &str = "\
Examples:
  loopexec run                                  # what loop.toml says, sandboxed, to a halt
  loopexec run --check 'cargo test' --exec './agent' --allow-host api.example.com
  loopexec run --once --json                    # one iteration, then pause
  loopexec run --resume <RUN_ID>                # continue a paused, interrupted or crashed run
  loopexec run --report target/junit.xml --budget-usd 5 --stall-timeout 300
  loopexec run --judge './judge.sh' --comprehension-every 3 --reviewer-pubkey <HEX>";

pub const STEP: &str = "\
Examples:
  loopexec step                                 # one iteration of a new run, then pause
  loopexec step --resume <RUN_ID>              # the next iteration of a paused run";

pub const STATUS: &str = "\
Examples:
  loopexec status                               # the latest run: phase, iteration, halt
  loopexec status <RUN_ID> --json
  loopexec status --follow                      # tail a running loop from another terminal
  loopexec status --follow --json               # JSON Lines, one object per event";

pub const WATCH: &str = "\
Examples:
  loopexec watch                                # alive, stale or halted (the heartbeat)
  loopexec watch --follow --kill --stall-timeout 300   # end a wedged run: heartbeat_stale";

pub const CHECK: &str = "\
Examples:
  loopexec check                                # the state directory and receipt chains
  loopexec check --workdir ../repo --json";

pub const REPORT: &str = "\
Examples:
  loopexec report                               # the latest run: iterations, guards, halt, cost
  loopexec report <RUN_ID> --json
  loopexec report --receipt /tmp/receipt.jsonl  # a receipt file someone sent you
  loopexec report <RUN_ID> --html report.html   # one self-contained HTML page";

pub const EXPLAIN_HALT: &str = "\
Examples:
  loopexec explain-halt                         # why the latest run stopped, and what to do
  loopexec explain-halt <RUN_ID> --json";

pub const INSPECT_COST: &str = "\
Examples:
  loopexec inspect-cost <RUN_ID>                # the run's cost under its pinned caps
  loopexec inspect-cost <RUN_ID> --budget-usd 2 # would a tighter cap have halted it, and when?
  loopexec inspect-cost --ledger costs.txt --budget-usd 10";

pub const ESCALATE: &str = "\
Examples:
  loopexec escalate <RUN_ID> --channel file --out escalation.json
  loopexec escalate <RUN_ID> --channel webhook --webhook https://hooks.example/x
  loopexec escalate <RUN_ID> --channel slack --slack-webhook-env SLACK_URL
  loopexec escalate <RUN_ID> --channel github --github-repo acme/app --github-issue 42";

pub const RATCHET: &str = "\
Examples:
  loopexec ratchet                              # the frontier of the latest run
  loopexec ratchet <RUN_ID> --accept 4 --key operator.key   # advance it by hand";

pub const SANDBOX: &str = "\
Examples:
  loopexec sandbox --rw . -- make test          # one command in an agent zone, . writable
  loopexec sandbox --builtin exec --ro . -- cargo test --offline
  loopexec sandbox --rw . --allow-host pypi.org -- pip download requests";

pub const POLICY: &str = "\
Examples:
  loopexec policy check policies/agent.toml     # does it parse and validate?
  loopexec policy show policies/agent.toml      # every effective key, and the policy's sha256
  loopexec policy diff policies/agent.toml policies/exec.toml";

pub const DOCTOR: &str = "\
Examples:
  loopexec doctor                               # which isolation layers this host offers
  loopexec doctor --policy policies/agent.toml  # can this policy run here?
  loopexec doctor --check 'cargo test'          # the oracle's gates: flakiness, mutants";

pub const ISOLATE: &str = "\
Examples:
  loopexec isolate                              # the zones' plan for loop.toml, nothing run
  loopexec isolate --backend podman --image localhost/agent:1";

pub const KEYGEN: &str = "\
Examples:
  loopexec keygen                               # the operator key pair (init makes one too)
  loopexec keygen --reviewer --dir ~/reviewer   # a reviewer's key for the comprehension gate";

pub const ACK: &str = "\
Examples:
  loopexec ack <RUN_ID> --key ~/reviewer/reviewer.key   # sign the unread diffs as reviewed";

pub const VERIFY: &str = "\
Examples:
  loopexec verify <RUN_ID>                      # offline, with your own operator key
  loopexec verify receipt.jsonl --pubkey operator.pub   # a third party's check
  loopexec verify <RUN_ID> --repo .             # and re-run the tree guards on its trees
  loopexec verify --all .loopexec/runs          # every run of the workdir, in parallel
  loopexec verify --all collection/ --pubkey operator.pub --json   # a fleet's collection";

pub const FLEET: &str = "\
Examples:
  loopexec fleet collect ./repo-a ./repo-b --out collection/   # their sealed runs, and branches
  loopexec fleet collect ./repo-a --out collection/ --json     # the summary as JSON";

pub const ATTEST: &str = "\
Examples:
  loopexec attest <RUN_ID> --key ~/.config/loopexec/operator.key";

pub const REPLAY: &str = "\
Examples:
  loopexec replay <RUN_ID>                      # the check again on the end-state tree";

pub const REEXECUTE: &str = "\
Examples:
  loopexec reexecute <RUN_ID> --samples 5       # what it would run, nothing started
  loopexec reexecute <RUN_ID> --samples 5 --confirm   # five fresh runs: their halt reasons";

pub const PROBE_CHECK: &str = "\
Examples:
  loopexec probe-check --check 'cargo test'     # is the check deterministic?
  loopexec probe-check --perturb order,seed,env --runs 59   # flake rate < 5% at 95%";

pub const COMPLETIONS: &str = "\
Examples:
  loopexec completions bash > ~/.local/share/bash-completion/completions/loopexec
  loopexec completions zsh > ~/.zfunc/_loopexec
  loopexec completions fish > ~/.config/fish/completions/loopexec.fish";

pub const MAN: &str = "\
Examples:
  loopexec man | man -l -                       # read loopexec(1)
  loopexec man --out ~/.local/share/man/man1    # one page per command";

#[cfg(test)]
mod tests {
    use super::super::Cli;
    use clap::{CommandFactory, Parser};

    /// The example lines of a command's after-help: each `  loopexec ...` line, comment removed.
    fn example_lines(text: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim_start().strip_prefix("loopexec "))
            .map(|l| {
                let cmd = match l.find("  #") {
                    Some(i) => &l[..i],
                    None => l,
                };
                // A pipe or a redirection ends the command line proper.
                cmd.split(" | ")
                    .next()
                    .unwrap_or(cmd)
                    .split(" > ")
                    .next()
                    .unwrap_or(cmd)
                    .trim()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn every_visible_command_has_an_examples_section_naming_itself() {
        let cli = Cli::command();
        for sub in cli
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            let after = sub
                .get_after_help()
                .map(|s| s.to_string())
                .unwrap_or_default();
            assert!(
                after.starts_with("Examples:\n"),
                "`loopexec {} --help` has no Examples section",
                sub.get_name()
            );
            let lines = example_lines(&after);
            assert!(
                !lines.is_empty(),
                "`loopexec {}` has no example line",
                sub.get_name()
            );
            for line in lines {
                assert!(
                    line.starts_with(sub.get_name()),
                    "an example of `{}` runs another command: {line}",
                    sub.get_name()
                );
            }
        }
    }

    #[test]
    fn every_example_line_fits_the_help_width_unwrapped() {
        let cli = Cli::command();
        for text in cli
            .get_subcommands()
            .filter_map(|s| s.get_after_help().map(|h| h.to_string()))
            .chain([super::super::EXAMPLES.to_string()])
        {
            for line in text
                .lines()
                .filter(|l| l.trim_start().starts_with("loopexec "))
            {
                assert!(
                    line.chars().count() <= 96,
                    "{} columns: {line}",
                    line.chars().count()
                );
            }
        }
    }

    #[test]
    fn every_example_in_every_help_parses_with_the_binarys_own_flags() {
        let cli = Cli::command();
        let mut texts: Vec<String> = cli
            .get_subcommands()
            .filter_map(|s| s.get_after_help().map(|h| h.to_string()))
            .collect();
        texts.push(super::super::EXAMPLES.to_string());
        let mut parsed = 0;
        for text in texts {
            for line in example_lines(&text) {
                let filled = line
                    .replace("<RUN_ID>", "20261203-000000-abcdef")
                    .replace("<HEX>", "00");
                let words = shlex::split(&filled)
                    .unwrap_or_else(|| panic!("example does not split: {line}"));
                let argv = std::iter::once("loopexec".to_string()).chain(words);
                if let Err(e) = Cli::try_parse_from(argv) {
                    panic!("example `loopexec {line}` does not parse: {e}");
                }
                parsed += 1;
            }
        }
        assert!(parsed >= 50, "only {parsed} examples parsed");
    }
}
