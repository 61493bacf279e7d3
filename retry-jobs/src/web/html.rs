//! HTML text: escaping, times and the page around each view.
//!
//! Every value a page shows that came from the store or the request goes through [`escape`]:
//! payloads, error texts, handler names, keys, query parameters. Pages are built as strings
//! (no template engine): the views are few and small, and one function to audit is simpler
//! than an engine's rules.

use retry_toolkit::store::Timestamp;

/// `text` made safe to place in HTML text and in a quoted attribute value: the five
/// characters that can end a text run or an attribute become character references.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A time as a reader wants it: RFC 3339 in UTC, and how far it is from `now`
/// (`in 4 min`, `3 h ago`). The one place the dashboard formats a time.
pub(super) fn when(at: Timestamp, now: Timestamp) -> String {
    let rfc = i64::try_from(at.as_millis())
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| format!("{} ms after the epoch", at.as_millis()));
    let (later, gap) = if at >= now {
        (true, at.as_millis() - now.as_millis())
    } else {
        (false, now.as_millis() - at.as_millis())
    };
    let secs = gap / 1000;
    let span = if secs == 0 {
        return format!("{rfc} (now)");
    } else if secs < 60 {
        format!("{secs} s")
    } else if secs < 3600 {
        format!("{} min", secs / 60)
    } else if secs < 86_400 {
        format!("{} h", secs / 3600)
    } else {
        format!("{} d", secs / 86_400)
    };
    if later {
        format!("{rfc} (in {span})")
    } else {
        format!("{rfc} ({span} ago)")
    }
}

/// A time cell, escaped, or a dash for none.
pub(super) fn when_opt(at: Option<Timestamp>, now: Timestamp) -> String {
    at.map_or_else(|| "—".to_owned(), |at| escape(&when(at, now)))
}

/// What every page shares: the owner, whether actions are on, the visitor's login, the
/// form secret.
pub(super) struct Frame<'a> {
    pub(super) owner: &'a str,
    pub(super) read_only: bool,
    pub(super) logged_in: bool,
    pub(super) csrf: &'a str,
}

/// A few lines of inline CSS: the page fetches nothing.
const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
nav a{margin-right:1em}table{border-collapse:collapse;margin:.5em 0}\
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#f2f2f2}pre{background:#f6f6f6;padding:.5em;white-space:pre-wrap;word-break:break-all}\
.msg{background:#e7f5e7;border:1px solid #7b7;padding:.5em}.err{background:#fbeaea;border:1px solid #c77;padding:.5em}\
form.inline{display:inline}button{cursor:pointer}";

impl Frame<'_> {
    /// The whole document around `body` (already HTML).
    pub(super) fn page(&self, title: &str, body: &str) -> String {
        let access = if self.read_only {
            "read-only".to_owned()
        } else if self.logged_in {
            format!(
                "actions on {}",
                self.form("/logout", "", "Log out", "logout")
            )
        } else {
            "<a href=\"/login\">Log in to act</a>".to_owned()
        };
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{title} · retry-jobs</title><style>{STYLE}</style></head><body>\
             <nav><strong>retry-jobs</strong> · owner <code>{owner}</code> · \
             <a href=\"/\">Status</a><a href=\"/work\">Work</a><a href=\"/in-flight\">In flight</a>\
             <a href=\"/dead\">Dead letters</a> <span id=\"access\">{access}</span></nav>\
             <h1>{title}</h1>\n{body}\n</body></html>\n",
            title = escape(title),
            owner = escape(self.owner),
        )
    }

    /// A POST form of one button with the CSRF field, or nothing when actions are off.
    pub(super) fn form(&self, action: &str, fields: &str, label: &str, id: &str) -> String {
        if self.read_only {
            return String::new();
        }
        format!(
            "<form class=\"inline\" method=\"post\" action=\"{action}\" id=\"{id}\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">{fields}\
             <button type=\"submit\">{label}</button></form>",
            action = escape(action),
            id = escape(id),
            csrf = escape(self.csrf),
            label = escape(label),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_escape_turns_markup_into_text() {
        assert_eq!(
            escape("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(escape("a&b\"c'd"), "a&amp;b&quot;c&#39;d");
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
        assert_eq!(escape(""), "");
    }

    #[test]
    fn v2_times_read_as_rfc_3339_and_a_distance() {
        let now = Timestamp::from_millis(1_796_179_745_000);
        assert_eq!(when(now, now), "2026-12-02T02:49:05Z (now)");
        let later = Timestamp::from_millis(now.as_millis() + 4 * 60_000 + 500);
        assert_eq!(when(later, now), "2026-12-02T02:53:05Z (in 4 min)");
        let earlier = Timestamp::from_millis(now.as_millis() - 3 * 3_600_000);
        assert_eq!(when(earlier, now), "2026-12-01T23:49:05Z (3 h ago)");
        let far = Timestamp::from_millis(u64::MAX);
        assert!(when(far, now).contains("ms after the epoch"));
    }
}
