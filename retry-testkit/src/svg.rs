//! A few lines of hand-written SVG: enough for a timeline and a line chart in the docs,
//! without a plotting dependency. Output is deterministic text (fixed decimals), so a chart
//! can be committed and diffed.

use std::fmt::Write as _;

/// An SVG document being written.
pub(crate) struct Svg {
    out: String,
}

/// Escapes text for use in SVG content and attribute values.
pub(crate) fn escape(text: &str) -> String {
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

/// Horizontal anchoring of a text label.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn name(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

impl Svg {
    pub(crate) fn new(width: f64, height: f64) -> Self {
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(
            out,
            r#"<rect x="0" y="0" width="{width:.0}" height="{height:.0}" fill="white"/>"#
        );
        Svg { out }
    }

    pub(crate) fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str, title: &str) {
        let _ = writeln!(
            self.out,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}"><title>{}</title></rect>"#,
            escape(title)
        );
    }

    pub(crate) fn line(&mut self, from: (f64, f64), to: (f64, f64), stroke: &str, dashed: bool) {
        let dash = if dashed {
            r#" stroke-dasharray="4 3""#
        } else {
            ""
        };
        let _ = writeln!(
            self.out,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{stroke}"{dash}/>"#,
            from.0, from.1, to.0, to.1
        );
    }

    pub(crate) fn polyline(&mut self, points: &[(f64, f64)], stroke: &str, title: &str) {
        let points: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            self.out,
            r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="2"><title>{}</title></polyline>"#,
            points.join(" "),
            escape(title)
        );
    }

    pub(crate) fn circle(&mut self, at: (f64, f64), fill: &str, title: &str) {
        let _ = writeln!(
            self.out,
            r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{fill}"><title>{}</title></circle>"#,
            at.0,
            at.1,
            escape(title)
        );
    }

    pub(crate) fn text(&mut self, at: (f64, f64), anchor: Anchor, size: u32, text: &str) {
        let _ = writeln!(
            self.out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="{}" font-size="{size}">{}</text>"#,
            at.0,
            at.1,
            anchor.name(),
            escape(text)
        );
    }

    pub(crate) fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

/// Round tick steps for an axis from zero to `max`: 1, 2 or 5 times a power of ten, about
/// `count` of them.
pub(crate) fn ticks(max: f64, count: u32) -> Vec<f64> {
    if !(max.is_finite() && max > 0.0) || count == 0 {
        return vec![0.0];
    }
    let rough = max / f64::from(count);
    let power = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * power);
    let mut ticks = Vec::new();
    let mut t = 0.0;
    while t <= max * (1.0 + 1e-9) {
        ticks.push(t);
        t += step;
    }
    ticks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(escape(r#"<a & "b">"#), "&lt;a &amp; &quot;b&quot;&gt;");
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(1000.0, 5), [0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]);
        assert_eq!(ticks(7.0, 4), [0.0, 2.0, 4.0, 6.0]);
        assert_eq!(ticks(0.0, 4), [0.0]);
        assert_eq!(ticks(f64::NAN, 4), [0.0]);
    }
}
