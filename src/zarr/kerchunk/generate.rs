//! Kerchunk v1 `templates` (`{{name}}` in URLs) and `gen` (references generated over
//! dimensions, with `{{ expression }}` fields). Expressions are integer arithmetic over the
//! dimension variables: `+ - * // / % ( )`, which is what generators write in practice.

use std::collections::BTreeMap;

use serde_json::Value;

/// Replaces `{{name}}` (spaces allowed inside the braces) with each template's text; other
/// `{{...}}` are left for the generator.
pub fn apply_templates(text: &str, templates: &BTreeMap<String, String>) -> String {
    if !text.contains("{{") {
        return text.to_owned();
    }
    let known = |expr: &str| Ok(templates.get(expr).cloned().unwrap_or_else(|| format!("{{{{{expr}}}}}")));
    render(text, &known).unwrap_or_else(|_| text.to_owned())
}

fn render(text: &str, lookup: &dyn Fn(&str) -> Result<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("}}").ok_or_else(|| format!("unclosed {{{{ in {text:?}"))? + start;
        out.push_str(&lookup(rest[start + 2..end].trim())?);
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// One generated reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    pub key: String,
    pub url: String,
    pub range: Option<(u64, u64)>,
}

/// The most references one `gen` entry may produce.
pub const MAX_GENERATED: u64 = 10_000_000;

/// The values of one `gen` dimension, never materialised: `N` (0..N), a list, or a range.
#[derive(Debug, Clone)]
enum Axis {
    Range { start: i64, step: i64, len: u64 },
    List(Vec<i64>),
}

impl Axis {
    fn parse(spec: &Value) -> Option<Self> {
        let range = |start: i64, stop: i64, step: i64| {
            let span = i128::from(stop) - i128::from(start);
            let len = if span > 0 { (span + i128::from(step) - 1) / i128::from(step) } else { 0 };
            u64::try_from(len).ok().map(|len| Self::Range { start, step, len })
        };
        match spec {
            Value::Number(n) => range(0, n.as_i64()?, 1),
            Value::Array(items) => items.iter().map(Value::as_i64).collect::<Option<Vec<_>>>().map(Self::List),
            Value::Object(o) => {
                let start = o.get("start").map_or(Some(0), Value::as_i64)?;
                let stop = o.get("stop").and_then(Value::as_i64)?;
                let step = o.get("step").map_or(Some(1), Value::as_i64)?;
                if step > 0 { range(start, stop, step) } else { None }
            }
            _ => None,
        }
    }

    fn len(&self) -> u64 {
        match self {
            Self::Range { len, .. } => *len,
            Self::List(v) => v.len() as u64,
        }
    }

    fn get(&self, i: u64) -> i64 {
        match self {
            Self::Range { start, step, .. } => start.saturating_add((i as i64).saturating_mul(*step)),
            Self::List(v) => v[i as usize],
        }
    }
}

/// The references of one `gen` entry, produced one at a time.
#[derive(Debug)]
pub struct Expansion {
    key: String,
    url: String,
    offset: Option<String>,
    length: Option<String>,
    axes: Vec<(String, Axis)>,
    index: Vec<u64>,
    remaining: u64,
}

/// Reads one `gen` entry: `{"key", "url", "offset"?, "length"?, "dimensions": {name: spec}}`,
/// a spec being `N` (0..N), a list, or `{"start", "stop", "step"}`. Refuses, before producing
/// anything, an entry of more than [`MAX_GENERATED`] references.
pub fn expand(entry: &Value, templates: &BTreeMap<String, String>) -> Result<Expansion, String> {
    let field = |name: &str| entry.get(name).and_then(Value::as_str).map(|s| apply_templates(s, templates));
    let key = field("key").ok_or("a gen entry needs a \"key\" template")?;
    let url = field("url").ok_or("a gen entry needs a \"url\" template")?;
    let (offset, length) = (field("offset"), field("length"));
    if offset.is_some() != length.is_some() {
        return Err("a gen entry needs both \"offset\" and \"length\", or neither".into());
    }
    let dims = entry.get("dimensions").and_then(Value::as_object).ok_or("a gen entry needs \"dimensions\"")?;
    let mut axes = Vec::with_capacity(dims.len());
    for (name, spec) in dims {
        let axis =
            Axis::parse(spec).ok_or_else(|| format!("dimension {name:?}: {spec} is not N, a list or a range"))?;
        axes.push((name.clone(), axis));
    }
    let total = axes.iter().try_fold(1u64, |acc, (_, a)| acc.checked_mul(a.len()));
    match total {
        Some(n) if n <= MAX_GENERATED => {
            Ok(Expansion { key, url, offset, length, index: vec![0; axes.len()], axes, remaining: n })
        }
        _ => Err(format!(
            "a gen entry expands to {} references; the limit is {MAX_GENERATED}",
            total.map_or_else(|| "more than 2^64".to_owned(), |n| n.to_string())
        )),
    }
}

impl Iterator for Expansion {
    type Item = Result<Generated, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let vars: BTreeMap<&str, i64> =
            self.axes.iter().zip(&self.index).map(|((n, a), i)| (n.as_str(), a.get(*i))).collect();
        let eval = |t: &str| render(t, &|expr| evaluate(expr, &vars).map(|n| n.to_string()));
        let number =
            |t: &str| eval(t)?.trim().parse::<u64>().map_err(|_| format!("{t:?} is not a non-negative integer"));
        let range = match (&self.offset, &self.length) {
            (Some(o), Some(l)) => number(o).and_then(|o| number(l).map(|l| Some((o, l)))),
            _ => Ok(None),
        };
        let generated = range.and_then(|range| Ok(Generated { key: eval(&self.key)?, url: eval(&self.url)?, range }));
        for axis in (0..self.axes.len()).rev() {
            self.index[axis] += 1;
            if self.index[axis] < self.axes[axis].1.len() {
                break;
            }
            self.index[axis] = 0;
        }
        if generated.is_err() {
            self.remaining = 0;
        }
        Some(generated)
    }
}

/// Evaluates integer arithmetic with variables (precedence climbing).
pub fn evaluate(expr: &str, vars: &BTreeMap<&str, i64>) -> Result<i64, String> {
    let tokens = tokenize(expr)?;
    let mut p = Parser { tokens: &tokens, at: 0, vars };
    let value = p.expression(0)?;
    if p.at != tokens.len() {
        return Err(format!("unexpected text in {expr:?}"));
    }
    Ok(value)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(i64),
    Name(String),
    Op(&'static str),
    Open,
    Close,
}

fn tokenize(expr: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' => i += 1,
            '0'..='9' => {
                let start = i;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                tokens.push(Token::Num(text.parse().map_err(|_| format!("{text} is too large"))?));
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                tokens.push(Token::Name(chars[start..i].iter().collect()));
            }
            '(' | ')' => {
                tokens.push(if c == '(' { Token::Open } else { Token::Close });
                i += 1;
            }
            '/' if chars.get(i + 1) == Some(&'/') => {
                tokens.push(Token::Op("//"));
                i += 2;
            }
            '+' | '-' | '*' | '/' | '%' => {
                tokens.push(Token::Op(match c {
                    '+' => "+",
                    '-' => "-",
                    '*' => "*",
                    '/' => "/",
                    _ => "%",
                }));
                i += 1;
            }
            _ => return Err(format!("unsupported character {c:?} in expression {expr:?}")),
        }
    }
    Ok(tokens)
}

struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    vars: &'a BTreeMap<&'a str, i64>,
}

impl Parser<'_> {
    fn expression(&mut self, min_precedence: u8) -> Result<i64, String> {
        let mut left = self.atom()?;
        while let Some(Token::Op(op)) = self.tokens.get(self.at) {
            let precedence = if matches!(*op, "+" | "-") { 1 } else { 2 };
            if precedence < min_precedence {
                break;
            }
            self.at += 1;
            let right = self.expression(precedence + 1)?;
            left = match *op {
                "+" => left.checked_add(right),
                "-" => left.checked_sub(right),
                "*" => left.checked_mul(right),
                "%" => (right != 0).then(|| left.rem_euclid(right)),
                "/" if right != 0 && left % right != 0 => return Err(format!("{left} / {right} is not an integer")),
                _ => (right != 0).then(|| left.div_euclid(right)),
            }
            .ok_or("arithmetic overflow or division by zero")?;
        }
        Ok(left)
    }

    fn atom(&mut self) -> Result<i64, String> {
        let token = self.tokens.get(self.at).cloned().ok_or("expression ends early")?;
        self.at += 1;
        match token {
            Token::Num(n) => Ok(n),
            Token::Name(name) => {
                self.vars.get(name.as_str()).copied().ok_or_else(|| format!("unknown variable {name:?}"))
            }
            Token::Op("-") => Ok(-self.atom()?),
            Token::Open => {
                let v = self.expression(0)?;
                match self.tokens.get(self.at) {
                    Some(Token::Close) => {
                        self.at += 1;
                        Ok(v)
                    }
                    _ => Err("missing )".into()),
                }
            }
            other => Err(format!("unexpected {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn templates() {
        let t = BTreeMap::from([("u".to_owned(), "s3://bucket/long/prefix".to_owned())]);
        assert_eq!(apply_templates("{{u}}/a.nc", &t), "s3://bucket/long/prefix/a.nc");
        assert_eq!(apply_templates("{{ u }}/b.nc", &t), "s3://bucket/long/prefix/b.nc");
        assert_eq!(apply_templates("/plain", &t), "/plain");
    }

    #[test]
    fn expressions() {
        let vars = BTreeMap::from([("i", 3), ("j", 2)]);
        assert_eq!(evaluate("1000 * i + 24", &vars).unwrap(), 3024);
        assert_eq!(evaluate("(i + 1) * (j - 1) // 2", &vars).unwrap(), 2);
        assert_eq!(evaluate("i % 2 + -j", &vars).unwrap(), -1);
        assert!(evaluate("i / j", &vars).is_err());
        assert!(evaluate("k", &vars).is_err());
        assert!(evaluate("i +", &vars).is_err());
    }

    #[test]
    fn expands_generators() {
        let entry = json!({"key": "data/{{i}}.{{j}}", "url": "{{u}}/f{{i}}.bin", "offset": "{{ 100 * j }}", "length": "100",
                           "dimensions": {"i": {"start": 0, "stop": 4, "step": 2}, "j": 2}});
        let t = BTreeMap::from([("u".to_owned(), "/data".to_owned())]);
        let out: Vec<Generated> = expand(&entry, &t).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(out[0], Generated { key: "data/0.0".into(), url: "/data/f0.bin".into(), range: Some((0, 100)) });
        assert_eq!(out[3], Generated { key: "data/2.1".into(), url: "/data/f2.bin".into(), range: Some((100, 100)) });
        assert!(expand(&json!({"key": "k", "url": "u", "dimensions": {"i": "x"}}), &t).is_err());
        let huge = json!({"key": "k{{i}}", "url": "u", "dimensions": {"i": {"stop": 100_000_000_000i64}}});
        assert!(expand(&huge, &t).unwrap_err().contains("100000000000 references"), "counted, never materialised");
        let overflow = json!({"key": "k", "url": "u", "dimensions": {"a": 65536, "b": 65536, "c": 65536, "d": 65536}});
        assert!(expand(&overflow, &t).unwrap_err().contains("more than 2^64"));
    }

    proptest! {
        #[test]
        fn evaluate_never_panics(expr in "[ij0-9+*/%() -]{0,30}") {
            let vars = BTreeMap::from([("i", 7), ("j", -3)]);
            let _ = evaluate(&expr, &vars);
        }
    }
}
