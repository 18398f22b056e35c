//! The model's tokenizer and chat template, both built from the GGUF's own
//! metadata (no other file): a byte-level BPE (`tokenizer.ggml.model` =
//! "gpt2") from `tokenizer.ggml.tokens` and `tokenizer.ggml.merges`, run by
//! the `tokenizers` crate, and the Jinja chat template
//! (`tokenizer.chat_template`) rendered by `minijinja`.

use anyhow::{anyhow, bail, Context as _, Result};
use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper, Tokenizer};

/// GGUF token types (llama.cpp's `llama_token_type`) that are special:
/// control (3) and user-defined (4) tokens are matched whole in the text.
const TOKEN_TYPE_CONTROL: i32 = 3;
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The tokenizer of a GGUF model.
pub struct GgufTokenizer {
    tokenizer: Tokenizer,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// Whether the model wants BOS at the start (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// Tokens whose generation ends a reply: EOS and the other control tokens
    /// a chat model ends turns with.
    pub stop: Vec<u32>,
    chat_template: Option<String>,
    tokens: Vec<String>,
}

fn meta<'a>(ct: &'a Content, key: &str) -> Result<&'a Value> {
    ct.metadata
        .get(key)
        .ok_or_else(|| anyhow!("the GGUF has no `{key}`"))
}

fn meta_u32(ct: &Content, key: &str) -> Option<u32> {
    ct.metadata.get(key).and_then(|v| v.to_u32().ok())
}

fn strings(v: &Value, key: &str) -> Result<Vec<String>> {
    v.to_vec()
        .with_context(|| format!("`{key}` is not an array"))?
        .iter()
        .map(|s| {
            s.to_string()
                .cloned()
                .with_context(|| format!("`{key}` holds a non-string"))
        })
        .collect()
}

impl GgufTokenizer {
    /// Builds the tokenizer from the GGUF's metadata.
    pub fn from_gguf(ct: &Content) -> Result<Self> {
        let model = meta(ct, "tokenizer.ggml.model")?.to_string()?.clone();
        if model != "gpt2" {
            bail!("tokenizer.ggml.model is `{model}`; this engine reads byte-level BPE (`gpt2`) vocabularies");
        }
        let tokens = strings(meta(ct, "tokenizer.ggml.tokens")?, "tokenizer.ggml.tokens")?;
        let merges = strings(meta(ct, "tokenizer.ggml.merges")?, "tokenizer.ggml.merges")?;
        let types: Vec<i32> = match ct.metadata.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()?
                .iter()
                .map(|t| t.to_i32())
                .collect::<candle_core::Result<_>>()?,
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() {
            bail!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                types.len(),
                tokens.len()
            );
        }

        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let merges: Vec<(String, String)> = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| anyhow!("merge `{m}` is not two tokens"))
            })
            .collect::<Result<_>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| anyhow!("building the BPE model: {e}"))?;

        // The pre-tokenizer llama.cpp and the model's own tokenizer use for
        // this vocabulary: digits one by one, then GPT-2's byte-level split.
        let pre = match ct
            .metadata
            .get("tokenizer.ggml.pre")
            .and_then(|v| v.to_string().ok())
            .map(String::as_str)
        {
            Some("smollm") | Some("starcoder") | Some("refact") => Sequence::new(vec![
                PreTokenizerWrapper::Digits(Digits::new(true)),
                PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, true)),
            ]),
            Some("gpt2") | Some("default") | None => {
                Sequence::new(vec![PreTokenizerWrapper::ByteLevel(ByteLevel::new(
                    false, true, true,
                ))])
            }
            Some(other) => bail!("tokenizer.ggml.pre `{other}` is not one this engine knows"),
        };

        let mut tokenizer = Tokenizer::new(bpe);
        tokenizer.with_pre_tokenizer(Some(pre));
        tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
        let special: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(_, &t)| t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_USER_DEFINED)
            .map(|(s, _)| AddedToken::from(s.clone(), true))
            .collect();
        tokenizer.add_special_tokens(&special);

        let bos = meta_u32(ct, "tokenizer.ggml.bos_token_id");
        let eos = meta_u32(ct, "tokenizer.ggml.eos_token_id");
        let add_bos = ct
            .metadata
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(false);
        let mut stop: Vec<u32> = eos.into_iter().collect();
        for name in ["<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<end_of_turn>"] {
            if let Some(id) = tokens.iter().position(|t| t == name) {
                let id = id as u32;
                if types[id as usize] == TOKEN_TYPE_CONTROL && !stop.contains(&id) {
                    stop.push(id);
                }
            }
        }
        let chat_template = ct
            .metadata
            .get("tokenizer.chat_template")
            .and_then(|v| v.to_string().ok())
            .cloned();
        Ok(GgufTokenizer {
            tokenizer,
            bos,
            eos,
            add_bos,
            stop,
            chat_template,
            tokens,
        })
    }

    /// The number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// Token ids of `text`; special tokens written in the text are matched
    /// whole. BOS is prepended when the model asks for it and `bos` is true.
    pub fn encode(&self, text: &str, bos: bool) -> Result<Vec<u32>> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| anyhow!("tokenizing: {e}"))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if bos && self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// The text of `ids`, special tokens included when `special` is true.
    pub fn decode(&self, ids: &[u32], special: bool) -> Result<String> {
        self.tokenizer
            .decode(ids, !special)
            .map_err(|e| anyhow!("detokenizing: {e}"))
    }

    /// The token's string in the vocabulary (byte-level form).
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Renders the GGUF's chat template for one conversation: an optional
    /// system message, then the user's message, then the assistant's turn.
    pub fn chat_prompt(&self, system: Option<&str>, user: &str) -> Result<String> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            anyhow!("the GGUF has no tokenizer.chat_template: run without --chat")
        })?;
        let mut env = minijinja::Environment::new();
        env.add_template("chat", template)
            .map_err(|e| anyhow!("the GGUF's chat template does not parse: {e}"))?;
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(minijinja::context! { role => "system", content => s });
        }
        messages.push(minijinja::context! { role => "user", content => user });
        let bos = self.bos.and_then(|b| self.token(b)).unwrap_or("");
        let eos = self.eos.and_then(|e| self.token(e)).unwrap_or("");
        env.get_template("chat")?
            .render(minijinja::context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => bos,
                eos_token => eos,
            })
            .map_err(|e| anyhow!("rendering the chat template: {e}"))
    }
}
