//! `loopexec completions SHELL` and `loopexec man [--out DIR | --markdown]`: the shell completion
//! script, the manual pages and the Markdown reference (docs/commands.md), generated from the clap definitions themselves (clap_complete, clap_mangen),
//! so they cannot drift from the binary. Both are text the operator installs; neither reads any
//! state.

use crate::error::{CmdResult, Failure};
use crate::output::Outcome;
use clap::CommandFactory;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete in (`source <(loopexec completions bash)`).
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write loopexec.1 and one loopexec-COMMAND.1 per command into DIR (created if missing)
    /// instead of printing loopexec.1.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the whole command-line reference as one Markdown document instead (docs/commands.md
    /// is this output).
    #[arg(long, conflicts_with = "out")]
    pub markdown: bool,
}

/// The completion script for `shell`.
pub fn completion_script(shell: Shell) -> String {
    let mut cmd = super::Cli::command();
    let mut buf = Vec::new();
    match shell {
        Shell::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "loopexec", &mut buf)
        }
        Shell::Zsh => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, "loopexec", &mut buf)
        }
        Shell::Fish => {
            clap_complete::generate(clap_complete::Shell::Fish, &mut cmd, "loopexec", &mut buf)
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The command-line reference as Markdown (clap-markdown): every visible command, its options
/// and its examples; docs/commands.md is this text.
pub fn markdown_reference() -> String {
    let options = clap_markdown::MarkdownOptions::new()
        .show_footer(false)
        .show_table_of_contents(true);
    fence_examples(&clap_markdown::help_markdown_command_custom(
        &super::Cli::command(),
        &options,
    ))
}

/// Each `Examples:` section of the help text (indented command lines) as a fenced shell block,
/// so that Markdown keeps its lines apart.
fn fence_examples(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len() + 1024);
    let mut in_examples = false;
    for line in markdown.lines() {
        if in_examples && !line.starts_with("  ") {
            out.push_str("```\n");
            in_examples = false;
        }
        if line == "Examples:" {
            out.push_str("**Examples:**\n\n```sh\n");
            in_examples = true;
            continue;
        }
        out.push_str(if in_examples {
            line.strip_prefix("  ").unwrap_or(line)
        } else {
            line
        });
        out.push('\n');
    }
    if in_examples {
        out.push_str("```\n");
    }
    out
}

/// The manual pages: `(file name, roff text)`, loopexec.1 first, then one per visible command.
pub fn man_pages() -> Result<Vec<(String, String)>, std::io::Error> {
    let cmd = super::Cli::command();
    let mut pages = Vec::new();
    let render = |man: clap_mangen::Man| -> Result<String, std::io::Error> {
        let mut buf = Vec::new();
        man.render(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    pages.push((
        "loopexec.1".to_string(),
        render(clap_mangen::Man::new(cmd.clone()))?,
    ));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("loopexec-{}", sub.get_name());
        pages.push((
            format!("{name}.1"),
            render(clap_mangen::Man::new(sub.clone()).title(name.clone()))?,
        ));
    }
    Ok(pages)
}

pub fn completions(args: CompletionsArgs, _json: bool) -> CmdResult<Outcome> {
    let script = completion_script(args.shell);
    let shell = match args.shell {
        Shell::Bash => "bash",
        Shell::Zsh => "zsh",
        Shell::Fish => "fish",
    };
    Ok(Outcome::ok("completions")
        .field(
            "completions",
            serde_json::json!({"shell": shell, "script": script}),
        )
        .human(script))
}

pub fn man(args: ManArgs, _json: bool) -> CmdResult<Outcome> {
    let pages =
        man_pages().map_err(|e| Failure::internal(format!("rendering the manual pages: {e}")))?;
    if args.markdown {
        let text = markdown_reference();
        return Ok(Outcome::ok("man")
            .field("man", serde_json::json!({"markdown": text}))
            .human(text));
    }
    let Some(dir) = args.out else {
        let page = pages
            .into_iter()
            .next()
            .map(|(_, text)| text)
            .unwrap_or_default();
        return Ok(Outcome::ok("man")
            .field("man", serde_json::json!({"page": "loopexec.1"}))
            .human(page));
    };
    std::fs::create_dir_all(&dir).map_err(|e| Failure::io(&dir, &e))?;
    let mut written = Vec::new();
    for (name, text) in &pages {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| Failure::io(&path, &e))?;
        written.push(path.to_string_lossy().into_owned());
    }
    let human = format!("{} manual page(s) in {}\n", written.len(), dir.display());
    Ok(Outcome::ok("man")
        .field("man", serde_json::json!({"dir": dir, "pages": written}))
        .human(human))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controls(text: &str) -> Vec<char> {
        text.chars()
            .filter(|c| c.is_control() && *c != '\n')
            .collect()
    }

    #[test]
    fn every_script_and_page_is_plain_text_that_passes_the_output_layer_unchanged() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = completion_script(shell);
            assert!(
                script.contains("inspect-cost") && script.contains("escalate"),
                "{shell:?}"
            );
            assert_eq!(controls(&script), Vec::<char>::new(), "{shell:?}");
        }
        let pages = man_pages().unwrap();
        assert_eq!(pages[0].0, "loopexec.1");
        assert!(pages.iter().any(|(name, _)| name == "loopexec-run.1"));
        assert!(
            !pages.iter().any(|(name, _)| name.contains("__probe-run")),
            "hidden commands have no page"
        );
        for (name, text) in &pages {
            assert_eq!(controls(text), Vec::<char>::new(), "{name}");
        }
    }
}
