//! The run's strings as an escalation carries them: bounded in length, with every control shown
//! as an escape (`inert`), and, for the chat channels, neutralised so that nothing the agent wrote
//! can mention people (`@channel`, `<!here>`, `<@U123>`), plant a link or an image, or format the
//! message: [`slack`] for Slack's mrkdwn, [`github`] for GitHub-flavoured markdown.

use crate::inert::inert;

/// The longest run string (in characters) a packet carries; longer ones are cut and marked.
pub const MAX_PACKET_STRING: usize = 4096;
/// The longest run string (in characters) a chat message carries.
pub const MAX_CHAT_STRING: usize = 600;

/// `text` cut to `max` characters, marked `…[truncated]` when cut.
pub fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…[truncated]", &text[..at]),
        None => text.to_string(),
    }
}

/// A run string for the packet: one inert line, bounded.
pub fn packet_string(text: &str) -> String {
    bounded(&inert(text), MAX_PACKET_STRING)
}

/// Every string of a JSON value (keys kept, values escaped and bounded), arrays cut to 200 items.
pub fn packet_value(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(packet_string(s)),
        Value::Array(items) => Value::Array(items.iter().take(200).map(packet_value).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (packet_string(k), packet_value(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `@` never starts a mention: shown as `(at)`; `.` and `:` as the look-alikes `․` (one dot
/// leader) and `∶` (ratio), so no domain or scheme in the text is auto-linked (`https://evil.example`
/// is shown as `https∶//evil․example`).
fn no_mentions(text: &str) -> String {
    text.replace('@', "(at)")
        .replace('.', "\u{2024}")
        .replace(':', "\u{2236}")
}

/// A run string for Slack mrkdwn: inert, bounded, `&`, `<`, `>` as entities (so `<!here>`,
/// `<@U1>` and `<url|label>` are plain text), `@` as `(at)`, and the formatting marks `*`, `_`,
/// `~` and `` ` `` replaced by look-alikes that do not format.
pub fn slack(text: &str) -> String {
    let line = bounded(&inert(text), MAX_CHAT_STRING);
    let mut out = String::with_capacity(line.len());
    for c in no_mentions(&line).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '*' => out.push('∗'),
            '_' => out.push('ˍ'),
            '~' => out.push('∼'),
            '`' => out.push('ʹ'),
            c => out.push(c),
        }
    }
    out
}

/// A run string for GitHub markdown: inert, bounded, `@` as `(at)`, and every character that
/// opens a link, an image, a tag, an emphasis, a code span or a table cell backslash-escaped.
pub fn github(text: &str) -> String {
    let line = bounded(&inert(text), MAX_CHAT_STRING);
    let mut out = String::with_capacity(line.len());
    for c in no_mentions(&line).chars() {
        if matches!(
            c,
            '\\' | '`'
                | '*'
                | '_'
                | '{'
                | '}'
                | '['
                | ']'
                | '('
                | ')'
                | '#'
                | '!'
                | '|'
                | '<'
                | '>'
                | '~'
                | '&'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_string_is_cut_at_a_character_boundary_and_marked() {
        assert_eq!(bounded("ééé", 2), "éé…[truncated]");
        assert_eq!(bounded("abc", 3), "abc");
    }

    #[test]
    fn slack_text_cannot_mention_link_or_carry_controls() {
        let s = slack("@channel <!here> <@U123> <https://evil|click> \u{1b}[2J\nnext");
        assert_eq!(s, "(at)channel &lt;!here&gt; &lt;(at)U123&gt; &lt;https\u{2236}//evil|click&gt; \\x1b[2J\\nnext");
    }

    #[test]
    fn github_text_cannot_mention_link_or_embed_an_image() {
        let s = github("@octocat ![x](https://e/i.png) [a](b) <img>");
        assert_eq!(s, "\\(at\\)octocat \\!\\[x\\]\\(https\u{2236}//e/i\u{2024}png\\) \\[a\\]\\(b\\) \\<img\\>");
    }

    #[test]
    fn a_bare_url_or_domain_is_no_link_in_either_chat() {
        for text in [
            slack("see https://evil.example/x and www.evil.example"),
            github("see https://evil.example/x and www.evil.example"),
        ] {
            assert!(!text.contains("://") && !text.contains("www."), "{text}");
            assert!(
                text.contains("https\u{2236}//evil\u{2024}example/x"),
                "{text}"
            );
        }
    }

    #[test]
    fn packet_values_are_escaped_recursively() {
        let v = packet_value(&serde_json::json!({"a": ["x\u{7}y", 3], "b\n": "ok"}));
        assert_eq!(v, serde_json::json!({"a": ["x\\x07y", 3], "b\\n": "ok"}));
    }
}
