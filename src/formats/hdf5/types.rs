//! HDF5 datatypes as Zarr v3 data types, the `bytes` codec's byte order, and values of them
//! decoded (fill values, attributes).

use base64::Engine;
use hdf5_reader::{ByteOrder, Datatype, StringSize};
use serde_json::{Value, json};

use crate::formats::cf;

/// What a dataset's elements are, for Zarr.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum ElementType {
    /// A number (or a bool-like enum as h5py reads it): its Zarr name, size and byte order.
    Number { name: &'static str, size: usize, order: ByteOrder },
    /// Fixed-length bytes strings of `size` bytes (`null_terminated_bytes`).
    FixedString { size: usize },
    /// Variable-length strings (held inline, `vlen-utf8`).
    VlenString,
}

impl ElementType {
    /// The datatype of `datatype`, or why it cannot be served.
    pub(super) fn of(datatype: &Datatype) -> Result<Self, String> {
        match datatype {
            Datatype::FixedPoint { size, signed, byte_order } => integer_name(*size, *signed)
                .map(|name| Self::Number { name, size: usize::from(*size), order: *byte_order }),
            Datatype::FloatingPoint { size, byte_order } => match size {
                2 => Ok("float16"),
                4 => Ok("float32"),
                8 => Ok("float64"),
                _ => Err(format!("a {size}-byte float")),
            }
            .map(|name| Self::Number { name, size: usize::from(*size), order: *byte_order }),
            Datatype::Enum { base, members } => match Self::of(base)? {
                Self::Number { size: 1, order, .. } if is_bool_enum(members) => {
                    Ok(Self::Number { name: "bool", size: 1, order })
                }
                number @ Self::Number { .. } => Ok(number),
                _ => Err("an enum of a non-numeric type".into()),
            },
            Datatype::String { size: StringSize::Fixed(size), .. } => Ok(Self::FixedString { size: *size as usize }),
            Datatype::String { size: StringSize::Variable, .. } => Ok(Self::VlenString),
            Datatype::VarLen { base, kind: hdf5_reader::VarLenKind::String, .. } if base.is_vlen_string_base() => {
                Ok(Self::VlenString)
            }
            Datatype::VarLen { .. } => Err("a variable-length sequence type".into()),
            Datatype::Compound { .. } => Err("a compound type".into()),
            Datatype::Array { .. } => Err("an array type".into()),
            Datatype::Opaque { .. } => Err("an opaque type".into()),
            Datatype::Reference { .. } => Err("a reference type".into()),
            Datatype::Bitfield { .. } => Err("a bitfield type".into()),
        }
    }

    /// The Zarr `data_type`.
    pub(super) fn data_type(&self) -> Value {
        match self {
            Self::Number { name, .. } => json!(name),
            Self::FixedString { size } => {
                json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": size}})
            }
            Self::VlenString => json!("string"),
        }
    }

    /// The first codec: `bytes` with the byte order of multi-byte numbers, or `vlen-utf8`.
    pub(super) fn array_to_bytes_codec(&self) -> Value {
        match self {
            Self::Number { size, order, .. } if *size > 1 => {
                let endian = if *order == ByteOrder::BigEndian { "big" } else { "little" };
                json!({"name": "bytes", "configuration": {"endian": endian}})
            }
            Self::VlenString => json!({"name": "vlen-utf8"}),
            _ => json!({"name": "bytes"}),
        }
    }

    /// Bytes of one element as stored (a vlen string: its heap reference, not known here).
    pub(super) fn size(&self) -> Option<usize> {
        match self {
            Self::Number { size, .. } | Self::FixedString { size } => Some(*size),
            Self::VlenString => None,
        }
    }

    /// The Zarr `fill_value` of the stored fill `bytes` (None: the type's default, as h5py).
    pub(super) fn fill_value(&self, bytes: Option<&[u8]>) -> Value {
        let bytes = bytes.filter(|b| Some(b.len()) == self.size());
        match (self, bytes) {
            (Self::Number { name, .. }, None) => cf::fill_value(0.0, name),
            (Self::Number { .. }, Some(bytes)) => self.number(bytes).unwrap_or(json!(0)),
            (Self::FixedString { size }, bytes) => {
                let bytes = bytes.map(<[u8]>::to_vec).unwrap_or_else(|| vec![0; *size]);
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
            (Self::VlenString, _) => json!(""),
        }
    }

    /// One number from its stored bytes, as Zarr writes it (NaN and infinities by name).
    pub(super) fn number(&self, bytes: &[u8]) -> Option<Value> {
        let Self::Number { name, size, order } = self else { return None };
        let mut raw = [0u8; 8];
        let bytes = bytes.get(..*size)?;
        if *order == ByteOrder::BigEndian {
            raw[..*size].copy_from_slice(bytes);
            raw[..*size].reverse();
        } else {
            raw[..*size].copy_from_slice(bytes);
        }
        let unsigned = u64::from_le_bytes(raw);
        let value = match *name {
            "bool" => json!(unsigned != 0),
            "float16" => cf::float_json(half_to_f64(unsigned as u16)),
            "float32" => cf::float_json(f64::from(f32::from_bits(unsigned as u32))),
            "float64" => cf::float_json(f64::from_bits(unsigned)),
            n if n.starts_with('u') => json!(unsigned),
            _ => {
                let shift = 64 - 8 * *size as u32;
                json!(((unsigned << shift) as i64) >> shift)
            }
        };
        Some(value)
    }

    /// The name of a number type (`int16`...), for CF fill attributes.
    pub(super) fn number_name(&self) -> Option<&'static str> {
        match self {
            Self::Number { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// IEEE half precision to f64.
fn half_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let fraction = f64::from(bits & 0x3ff);
    sign * match exponent {
        0 => fraction * 2f64.powi(-24),
        31 if fraction == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + fraction / 1024.0) * 2f64.powi(exponent - 15),
    }
}

fn integer_name(size: u8, signed: bool) -> Result<&'static str, String> {
    Ok(match (size, signed) {
        (1, true) => "int8",
        (2, true) => "int16",
        (4, true) => "int32",
        (8, true) => "int64",
        (1, false) => "uint8",
        (2, false) => "uint16",
        (4, false) => "uint32",
        (8, false) => "uint64",
        _ => return Err(format!("a {size}-byte integer")),
    })
}

/// h5py reads an enum of exactly FALSE = 0 and TRUE = 1 (its encoding of numpy bools) as bool.
fn is_bool_enum(members: &[hdf5_reader::EnumMember]) -> bool {
    let value = |name: &str| {
        members.iter().find(|m| m.name == name).map(|m| m.value.iter().map(|b| u64::from(*b)).sum::<u64>())
    };
    members.len() == 2 && value("FALSE") == Some(0) && value("TRUE") == Some(1)
}
