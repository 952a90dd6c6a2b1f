//! Single values: key files and keys, names, addresses.

use super::*;

impl Validator<'_> {
    /// Reads and decodes the private key file; refuses it when others may read it.
    pub(super) fn private_key(
        &mut self,
        value: &Option<Sp<String>>,
        example: &str,
    ) -> Result<(PathBuf, [u8; KEY_LEN])> {
        let root = Table {
            path: "",
            header: None,
        };
        let value = self.required(value, &root, "private_key_file", example)?;
        let field = "private_key_file";
        let span = value.span();
        let written = value.get_ref();
        if written.trim().is_empty() {
            return Err(self
                .error(span, field, "is empty")
                .with_hint(format!("give the path of the key file, e.g. {example}")));
        }
        let path = self.base_dir.join(written);
        let shown = path.display().to_string();
        let genkey = format!(
            "create one with `(umask 077; mptund genkey > {shown})` and give the output of \
             `mptund pubkey < {shown}` to the other side"
        );
        let metadata = std::fs::metadata(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                self.error(
                    span.clone(),
                    field,
                    format!("private key file {shown} does not exist"),
                )
                .with_hint(genkey.clone())
            } else {
                self.error(
                    span.clone(),
                    field,
                    format!("cannot read private key file {shown}: {e}"),
                )
                .with_hint("check the path and that the daemon's user may read the file")
            }
        })?;
        if !metadata.is_file() {
            return Err(self
                .error(span, field, format!("{shown} is not a regular file"))
                .with_hint("point private_key_file at the file written by `mptund genkey`"));
        }
        if metadata.len() > MAX_KEY_FILE_BYTES {
            return Err(self
                .error(
                    span,
                    field,
                    format!("{shown} is {} bytes, too large for a key file", metadata.len()),
                )
                .with_hint("a key file holds 44 base64 characters and a newline, as written by `mptund genkey`"));
        }
        let bytes = std::fs::read(&path).map_err(|e| {
            self.error(
                span.clone(),
                field,
                format!("cannot read private key file {shown}: {e}"),
            )
            .with_hint(format!(
                "check that the daemon's user may read the file (the systemd unit runs as \
                 user mptund: `chown mptund: {shown}`)"
            ))
        })?;
        let text = String::from_utf8_lossy(&bytes);
        let key = decode_key(&text).map_err(|e| {
            self.error(span.clone(), field, format!("private key file {shown} {e}"))
                .with_hint(format!("replace it: {genkey}"))
        })?;
        self.check_key_permissions(&path, &metadata)
            .map_err(|(problem, hint)| self.error(span, field, problem).with_hint(hint))?;
        Ok((path, key))
    }

    /// A private key that group or others may read is refused: anyone on the
    /// machine who reads it can impersonate this side of every tunnel. Returns the
    /// problem and the fix.
    #[cfg(unix)]
    pub(super) fn check_key_permissions(
        &self,
        path: &Path,
        metadata: &std::fs::Metadata,
    ) -> std::result::Result<(), (String, String)> {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            let shown = path.display();
            return Err((
                format!(
                    "private key file {shown} may be read by group or others (mode {mode:03o}), \
                     so it is refused"
                ),
                format!("run `chmod 600 {shown}`"),
            ));
        }
        Ok(())
    }

    #[cfg(not(unix))]
    pub(super) fn check_key_permissions(
        &self,
        _path: &Path,
        _metadata: &std::fs::Metadata,
    ) -> std::result::Result<(), (String, String)> {
        Ok(())
    }

    /// Reads `metrics.bearer_token_file`: the token is the file's text without the
    /// whitespace around it (Prometheus trims its `credentials_file` the same way).
    /// A file every user may read is a warning, not an error: the token guards the
    /// endpoint from other hosts.
    pub(super) fn bearer_token(&mut self, value: &Sp<String>) -> Result<BearerToken> {
        let field = "metrics.bearer_token_file";
        let span = value.span();
        let written = value.get_ref();
        if written.trim().is_empty() {
            return Err(self.error(span, field, "is empty").with_hint(
                "give the path of the file that holds the token, e.g. \"/etc/mptund/metrics.token\", \
                 or remove bearer_token_file to serve /metrics without a token",
            ));
        }
        let path = self.base_dir.join(written);
        let shown = path.display().to_string();
        let create = format!(
            "create it with `(umask 077; head -c 32 /dev/urandom | base64 > {shown})` and give \
             Prometheus the same token (`authorization: {{ credentials_file: ... }}` in its \
             scrape config)"
        );
        let unreadable = |e: std::io::Error| {
            self.error(
                span.clone(),
                field,
                format!("cannot read bearer token file {shown}: {e}"),
            )
            .with_hint(format!(
                "check the path and that the daemon's user may read the file (the systemd unit \
                 runs as user mptund: `chown mptund: {shown}`)"
            ))
        };
        let metadata = std::fs::metadata(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                self.error(
                    span.clone(),
                    field,
                    format!("bearer token file {shown} does not exist"),
                )
                .with_hint(create.clone())
            } else {
                unreadable(e)
            }
        })?;
        if !metadata.is_file() {
            return Err(self
                .error(span, field, format!("{shown} is not a regular file"))
                .with_hint("point bearer_token_file at the file that holds the token"));
        }
        if metadata.len() > MAX_TOKEN_FILE_BYTES {
            return Err(self
                .error(
                    span,
                    field,
                    format!(
                        "{shown} is {} bytes, too large for a bearer token file",
                        metadata.len()
                    ),
                )
                .with_hint(format!(
                    "the file holds the token and nothing else; {create}"
                )));
        }
        let bytes = std::fs::read(&path).map_err(unreadable)?;
        let token = String::from_utf8_lossy(&bytes);
        let token = token.trim();
        if token.is_empty() {
            return Err(self
                .error(span, field, format!("bearer token file {shown} is empty"))
                .with_hint(format!("put the token in it: {create}")));
        }
        if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
            return Err(self
                .error(
                    span,
                    field,
                    format!(
                        "the token in {shown} holds a space, a control character or a non-ASCII \
                         character, which an Authorization header cannot carry"
                    ),
                )
                .with_hint(format!("use one word of printable ASCII; {create}")));
        }
        if let Some(mode) = others_may_read(&metadata) {
            self.warnings.push(format!(
                "{}:{}: {field}: {shown} may be read by every user of this host (mode {mode:03o}); \
                 run `chmod o-rwx {shown}`",
                self.src.file.display(),
                self.line_of(&span)
            ));
        }
        Ok(BearerToken::new(path, token.as_bytes()))
    }

    /// `state_directory` (client): an existing directory, resolved against the
    /// configuration's directory. The daemon writes its handshake timestamp there.
    pub(super) fn state_directory(&self, raw: &Option<Sp<String>>) -> Result<Option<PathBuf>> {
        let Some(value) = raw else {
            return Ok(None);
        };
        let field = "state_directory";
        let written = value.get_ref();
        if written.trim().is_empty() {
            return Err(self.error(value.span(), field, "is empty").with_hint(
                "give a directory the daemon may write, e.g. \"/var/lib/mptund\", or remove \
                 state_directory (under systemd the unit's StateDirectory= is used)",
            ));
        }
        let path = self.base_dir.join(written);
        let shown = path.display();
        match std::fs::metadata(&path) {
            Ok(metadata) if metadata.is_dir() => Ok(Some(path)),
            Ok(_) => Err(self
                .error(value.span(), field, format!("{shown} is not a directory"))
                .with_hint("give a directory the daemon may write, e.g. \"/var/lib/mptund\"")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(self
                .error(value.span(), field, format!("{shown} does not exist"))
                .with_hint(format!(
                    "create it for the daemon's user (`install -d -o mptund -g mptund -m 0700 \
                     {shown}`), or remove state_directory: under systemd the unit's \
                     StateDirectory=mptund provides /var/lib/mptund"
                ))),
            Err(e) => Err(self
                .error(value.span(), field, format!("cannot read {shown}: {e}"))
                .with_hint("check the path and that the daemon's user may enter the directory")),
        }
    }

    pub(super) fn public_key(
        &self,
        value: &Sp<String>,
        field: &str,
        hint: &str,
    ) -> Result<[u8; KEY_LEN]> {
        decode_key(value.get_ref()).map_err(|e| {
            self.error(
                value.span(),
                field,
                format!("{:?} {e}", shorten(value.get_ref())),
            )
            .with_hint(hint)
        })
    }

    /// A name for logs and metrics: `[A-Za-z0-9_.-]{1,32}`.
    pub(super) fn label(
        &self,
        value: &Sp<String>,
        field: &str,
        what: &str,
        examples: &str,
    ) -> Result<String> {
        let name = value.get_ref();
        let valid = (1..=MAX_LABEL_CHARS).contains(&name.chars().count())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if valid {
            return Ok(name.clone());
        }
        Err(self
            .error(
                value.span(),
                field,
                format!(
                    "{:?} is not a valid {what} name (1 to {MAX_LABEL_CHARS} letters, digits, '_', '.' or '-')",
                    shorten(name)
                ),
            )
            .with_hint(format!("use a short name such as {examples}")))
    }

    /// A Linux interface name (`dev_valid_name`).
    pub(super) fn interface_name(
        &self,
        value: &Sp<String>,
        field: &str,
        hint: &str,
    ) -> Result<String> {
        let name = value.get_ref();
        let valid = !name.is_empty()
            && name.len() <= MAX_INTERFACE_NAME_BYTES
            && name != "."
            && name != ".."
            && !name
                .chars()
                .any(|c| c.is_whitespace() || c == '/' || c == ':');
        if valid {
            return Ok(name.clone());
        }
        Err(self
            .error(
                value.span(),
                field,
                format!(
                    "{:?} is not a valid interface name (at most {MAX_INTERFACE_NAME_BYTES} characters, no spaces, '/' or ':')",
                    shorten(name)
                ),
            )
            .with_hint(hint))
    }

    pub(super) fn ip_net(&self, value: &Sp<String>, field: &str, hint: &str) -> Result<IpNet> {
        value.get_ref().trim().parse::<IpNet>().map_err(|e| {
            self.error(
                value.span(),
                field,
                format!(
                    "{:?} is not an address/prefix_len: {e}",
                    shorten(value.get_ref())
                ),
            )
            .with_hint(hint)
        })
    }

    pub(super) fn source_address(&self, value: &Sp<String>, field: &str) -> Result<IpAddr> {
        let text = value.get_ref();
        let hint =
            "give the uplink's own local IP address as shown by `ip addr`, e.g. \"198.18.1.2\"";
        let ip: IpAddr = text.trim().parse().map_err(|_| {
            let problem = format!("{:?} is not an IP address", shorten(text));
            self.error(value.span(), field, problem).with_hint(hint)
        })?;
        if ip.is_unspecified() || ip.is_multicast() {
            return Err(self
                .error(
                    value.span(),
                    field,
                    format!("{ip} cannot be a source address"),
                )
                .with_hint(format!(
                    "{hint}, or leave source_address out and bind by `interface` only"
                )));
        }
        Ok(ip)
    }

    pub(super) fn endpoint(&self, value: &Sp<String>, field: &str) -> Result<SocketAddr> {
        self.socket_addr(value, field, false)
    }

    /// `IP:port` or `[IPv6]:port`; `listen` may use the unspecified address.
    pub(super) fn socket_addr(
        &self,
        value: &Sp<String>,
        field: &str,
        listening: bool,
    ) -> Result<SocketAddr> {
        let text = value.get_ref().trim();
        let example = if listening {
            "\"0.0.0.0:51900\" or \"[::]:51900\""
        } else {
            "\"198.18.0.1:51900\" or \"[2001:db8::1]:51900\""
        };
        let fail = |problem: String, hint: String| {
            self.error(value.span(), field, problem).with_hint(hint)
        };
        let shown = shorten(text);
        let addr: SocketAddr = match text.parse() {
            Ok(addr) => addr,
            Err(_) => {
                if let Ok(ip) = text.parse::<IpAddr>() {
                    let with_port = match ip {
                        IpAddr::V4(_) => format!("{ip}:51900"),
                        IpAddr::V6(_) => format!("[{ip}]:51900"),
                    };
                    return Err(fail(
                        format!("{shown:?} has no port"),
                        format!("add the UDP port, e.g. \"{with_port}\""),
                    ));
                }
                if text.matches(':').count() > 1 && !text.starts_with('[') {
                    return Err(fail(
                        format!("{shown:?} is not an address:port"),
                        "write an IPv6 address in brackets before the port, e.g. \"[2001:db8::1]:51900\"".to_string(),
                    ));
                }
                let host = text.rsplit_once(':').map_or(text, |(host, _)| host);
                if host.chars().any(|c| c.is_ascii_alphabetic()) && !host.starts_with('[') {
                    return Err(fail(
                        format!("{shown:?} is a host name, not an IP address"),
                        format!(
                            "DNS names are not resolved (the tunnel must come up without DNS); write the IP address and port, e.g. {example}; `getent ahosts {}` shows the addresses",
                            shorten(host)
                        ),
                    ));
                }
                return Err(fail(
                    format!("{shown:?} is not an address:port"),
                    format!("write it as {example}"),
                ));
            }
        };
        if addr.port() == 0 {
            return Err(fail(
                format!("{shown:?} has port 0"),
                format!("give the UDP port explicitly, e.g. {example}"),
            ));
        }
        if !listening && (addr.ip().is_unspecified() || addr.ip().is_multicast()) {
            return Err(fail(
                format!("{} cannot be a destination", addr.ip()),
                format!("give the server's own unicast address, e.g. {example}"),
            ));
        }
        if listening && addr.ip().is_multicast() {
            return Err(fail(
                format!("cannot listen on multicast address {}", addr.ip()),
                format!("write it as {example}"),
            ));
        }
        Ok(addr)
    }
}

/// The file's mode when users other than its owner and group may read it.
#[cfg(unix)]
fn others_may_read(metadata: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = metadata.permissions().mode() & 0o777;
    (mode & 0o004 != 0).then_some(mode)
}

#[cfg(not(unix))]
fn others_may_read(_metadata: &std::fs::Metadata) -> Option<u32> {
    None
}
