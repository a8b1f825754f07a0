//! `zarrgate config`: the effective configuration as TOML that `--config` reads back, its
//! secrets redacted and what was redacted said in comments.

use super::Config;
use crate::redact::{redact_options, redact_url};

impl Config {
    /// The configuration as a TOML file the server accepts back. Tokens are left out (a
    /// placeholder would be refused, or worse, accepted as a token); a password in
    /// `database_url` (in its userinfo or its query), and the secret options and URL credentials of object stores, read `***`.
    /// A header comment says what was redacted and how to give it again.
    pub fn to_redacted_toml(&self) -> anyhow::Result<String> {
        let toml::Value::Table(mut table) = toml::Value::try_from(self)? else {
            anyhow::bail!("the configuration is not a TOML table");
        };
        let mut notes = Vec::new();
        for (key, tokens, var) in [
            ("admin_tokens", &self.admin_tokens, "ZARRGATE_ADMIN_TOKENS"),
            ("read_tokens", &self.read_tokens, "ZARRGATE_READ_TOKENS"),
        ] {
            if !tokens.is_empty() {
                table.remove(key);
                notes.push(format!("{key}: {} token(s) left out; give them in {var}", tokens.len()));
            }
        }
        let database_url = redact_url(&self.database_url);
        if database_url != self.database_url {
            table.insert("database_url".into(), database_url.into());
            notes.push("database_url: its password reads ***; give the real URL in DATABASE_URL".into());
        }
        let mut stores = toml::value::Array::new();
        for store in &self.object_stores {
            let mut redacted = store.clone();
            redacted.url = redact_url(&store.url);
            redacted.options = redact_options(&store.options);
            // Said again when the file read back already has `***`, so that printing it again
            // gives the same file.
            if redacted.url != store.url || redacted.options.values().any(|v| v == "***") {
                notes.push(format!(
                    "object store {:?}: its secrets read ***; put them back in the file, or use a file of your own",
                    store.name
                ));
            }
            stores.push(toml::Value::try_from(redacted)?);
        }
        table.insert("object_stores".into(), toml::Value::Array(stores));
        let mut out = String::from(
            "# zarrgate's effective configuration (defaults, then the configuration file, then ZARRGATE_*\n\
             # variables, then flags), as `zarrgate config` prints it; `zarrgate --config FILE` reads it back.\n",
        );
        if notes.is_empty() {
            out.push_str("# Nothing was redacted.\n");
        } else {
            out.push_str("# Redacted:\n");
            for note in notes {
                out.push_str(&format!("#   {note}\n"));
            }
        }
        out.push('\n');
        out.push_str(&toml::to_string(&table)?);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_left_out_and_the_rest_reads_back_the_same() {
        let mut config = Config {
            admin_tokens: vec!["admin-token-0123456789".into()],
            read_tokens: vec!["read-token-0123456789".into()],
            database_url: "postgres://zarrgate:hunter2-password@db:5432/zarrgate?sslpassword=hunter3-password".into(),
            ..Config::default()
        };
        config.cache.blocks_bytes = 12345;
        let store = serde_json::json!({"region": "eu-west-1", "secret_access_key": "very-secret-key"});
        config.object_stores.push(super::super::ObjectStoreConfig {
            name: "bucket".into(),
            url: "s3://bucket/prefix/".into(),
            options: store.as_object().unwrap_or(&serde_json::Map::new()).clone(),
        });
        let text = config.to_redacted_toml().unwrap_or_default();
        for secret in [
            "admin-token-0123456789",
            "read-token-0123456789",
            "hunter2-password",
            "hunter3-password",
            "very-secret-key",
        ] {
            assert!(!text.contains(secret), "{secret} shown:\n{text}");
        }
        assert!(text.contains("admin_tokens: 1 token(s) left out; give them in ZARRGATE_ADMIN_TOKENS"), "{text}");
        assert!(text.contains("database_url = \"postgres://zarrgate:***@db:5432/zarrgate?sslpassword=***\""), "{text}");

        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("printed.toml");
        std::fs::write(&file, &text).unwrap_or_else(|e| panic!("{e}"));
        let tokens = |k: &str| match k {
            "ZARRGATE_ADMIN_TOKENS" => Some("admin-token-0123456789".to_owned()),
            "ZARRGATE_READ_TOKENS" => Some("read-token-0123456789".to_owned()),
            _ => None,
        };
        let back = Config::load(Some(&file), tokens).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
        assert_eq!(back.cache.blocks_bytes, 12345);
        assert_eq!(back.admin_tokens, config.admin_tokens);
        assert_eq!(back.object_stores[0].options["region"], "eu-west-1");
        assert_eq!(back.object_stores[0].options["secret_access_key"], "***");
    }
}
