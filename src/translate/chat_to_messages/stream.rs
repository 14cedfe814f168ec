//! The provider's event stream translated for the caller (interface only: being written).

#[derive(Debug, Default)]
pub struct Translator {
    finished: bool,
}

impl Translator {
    pub fn push(&mut self, chunk: &[u8], end: bool, out: &mut Vec<u8>) {
        out.extend_from_slice(chunk);
        self.finished |= end;
    }

    pub fn finished(&self) -> bool {
        self.finished
    }
}
