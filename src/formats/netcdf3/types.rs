//! netCDF3's external types: their codes, sizes, Zarr data types, default fills, and attribute
//! values decoded into JSON as xarray reads them.

use base64::Engine;
use serde_json::{Value, json};

use crate::formats::cf;

/// `NC_FILL_FLOAT` and `NC_FILL_DOUBLE` (one value, 9.9692099683868690e+36).
const FILL_REAL: f64 = 9.969209968386869e36;

/// One of netCDF3's external types (CDF-5 adds the unsigned ones and the 64-bit integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NcType {
    Byte,
    Char,
    Short,
    Int,
    Float,
    Double,
    UByte,
    UShort,
    UInt,
    Int64,
    UInt64,
}

/// A number of an attribute, held exactly: 64-bit integers do not fit a float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int(i128),
    Real(f64),
}

impl NcType {
    /// The type a code names: codes 7..=11 only in CDF-5 files.
    pub fn from_code(code: u64, cdf5: bool) -> Option<Self> {
        Some(match code {
            1 => Self::Byte,
            2 => Self::Char,
            3 => Self::Short,
            4 => Self::Int,
            5 => Self::Float,
            6 => Self::Double,
            7 if cdf5 => Self::UByte,
            8 if cdf5 => Self::UShort,
            9 if cdf5 => Self::UInt,
            10 if cdf5 => Self::Int64,
            11 if cdf5 => Self::UInt64,
            _ => return None,
        })
    }

    /// Bytes of one value.
    pub fn size(self) -> u64 {
        match self {
            Self::Byte | Self::Char | Self::UByte => 1,
            Self::Short | Self::UShort => 2,
            Self::Int | Self::UInt | Self::Float => 4,
            Self::Double | Self::Int64 | Self::UInt64 => 8,
        }
    }

    /// The Zarr v3 name of a numeric type (None for char).
    pub fn numeric_name(self) -> Option<&'static str> {
        Some(match self {
            Self::Byte => "int8",
            Self::Char => return None,
            Self::Short => "int16",
            Self::Int => "int32",
            Self::Float => "float32",
            Self::Double => "float64",
            Self::UByte => "uint8",
            Self::UShort => "uint16",
            Self::UInt => "uint32",
            Self::Int64 => "int64",
            Self::UInt64 => "uint64",
        })
    }

    /// The Zarr v3 `data_type`: chars are numpy's `S1`, as the kerchunk converter writes it.
    pub fn data_type(self) -> Value {
        match self.numeric_name() {
            Some(name) => json!(name),
            None => json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 1}}),
        }
    }

    fn is_real(self) -> bool {
        matches!(self, Self::Float | Self::Double)
    }

    /// The range of an integer type.
    fn int_range(self) -> (i128, i128) {
        match self {
            Self::Byte => (i8::MIN.into(), i8::MAX.into()),
            Self::Short => (i16::MIN.into(), i16::MAX.into()),
            Self::Int => (i32::MIN.into(), i32::MAX.into()),
            Self::Int64 => (i64::MIN.into(), i64::MAX.into()),
            Self::UByte => (0, u8::MAX.into()),
            Self::UShort => (0, u16::MAX.into()),
            Self::UInt => (0, u32::MAX.into()),
            Self::UInt64 => (0, u64::MAX.into()),
            Self::Char | Self::Float | Self::Double => (0, 0),
        }
    }

    /// netCDF3's default fill value (`NC_FILL_*`), which the library writes where nothing was.
    pub fn default_fill(self) -> Number {
        match self {
            Self::Byte => Number::Int(-127),
            Self::Char => Number::Int(0),
            Self::Short => Number::Int(-32767),
            Self::Int => Number::Int(-2147483647),
            Self::Float | Self::Double => Number::Real(FILL_REAL),
            Self::UByte => Number::Int(255),
            Self::UShort => Number::Int(65535),
            Self::UInt => Number::Int(4294967295),
            Self::Int64 => Number::Int(-9223372036854775806),
            Self::UInt64 => Number::Int(18446744073709551614),
        }
    }

    /// `number` as a value of this type, or None when it does not fit (a fractional value for
    /// an integer type, or one out of its range).
    fn fitting(self, number: Number) -> Option<Number> {
        if self.is_real() {
            return Some(Number::Real(match number {
                Number::Int(i) => i as f64,
                Number::Real(f) => f,
            }));
        }
        let int = match number {
            Number::Int(i) => i,
            Number::Real(f) if f.fract() == 0.0 && f.abs() < 1.8e19 => f as i128,
            Number::Real(_) => return None,
        };
        let (min, max) = if self == Self::Char { (0, 255) } else { self.int_range() };
        (min..=max).contains(&int).then_some(Number::Int(int))
    }

    /// The Zarr `fill_value` of `number` for an array of this type, or None when it does not fit.
    pub fn fill_value(self, number: Number) -> Option<Value> {
        Some(match (self, self.fitting(number)?) {
            (Self::Char, Number::Int(byte)) => {
                json!(base64::engine::general_purpose::STANDARD.encode([byte as u8]))
            }
            (_, Number::Int(int)) => int_json(int),
            (_, Number::Real(real)) => cf::fill_value(real, self.numeric_name().unwrap_or("float64")),
        })
    }

    /// A `_FillValue`/`missing_value` attribute as xarray's Zarr reader decodes it for an array
    /// of this type, or None when it cannot (chars, values that do not fit the type).
    pub fn fill_attribute(self, number: Number) -> Option<Value> {
        let name = self.numeric_name()?;
        match self.fitting(number)? {
            Number::Int(int) => Some(int_json(int)),
            Number::Real(real) => cf::fill_attribute(real, name),
        }
    }

    /// The numbers of an attribute's big-endian values (`bytes.len()` a multiple of the size).
    pub fn numbers(self, bytes: &[u8]) -> Vec<Number> {
        let size = self.size() as usize;
        bytes.chunks_exact(size).map(|value| self.number(value)).collect()
    }

    fn number(self, be: &[u8]) -> Number {
        let mut word = [0u8; 8];
        word[8 - be.len()..].copy_from_slice(be);
        let unsigned = u64::from_be_bytes(word);
        let bits = (be.len() * 8) as u32;
        let signed = ((unsigned << (64 - bits)) as i64 >> (64 - bits)) as i128;
        match self {
            Self::Byte | Self::Short | Self::Int | Self::Int64 => Number::Int(signed),
            Self::Char | Self::UByte | Self::UShort | Self::UInt | Self::UInt64 => Number::Int(unsigned.into()),
            Self::Float => Number::Real(f32::from_bits(unsigned as u32).into()),
            Self::Double => Number::Real(f64::from_bits(unsigned)),
        }
    }

    /// An attribute's value as xarray reads it: chars as a string less its trailing NULs,
    /// one number as a number, several as a list.
    pub fn attribute_value(self, bytes: &[u8]) -> Value {
        if self == Self::Char {
            let end = bytes.iter().rposition(|b| *b != 0).map_or(0, |last| last + 1);
            return json!(String::from_utf8_lossy(&bytes[..end]));
        }
        let mut numbers: Vec<Value> = self.numbers(bytes).into_iter().map(number_json).collect();
        if numbers.len() == 1 { numbers.remove(0) } else { Value::Array(numbers) }
    }
}

/// A number as JSON (a NaN or infinite real becomes null: JSON has no such numbers).
pub fn number_json(number: Number) -> Value {
    match number {
        Number::Int(int) => int_json(int),
        Number::Real(real) => json!(real),
    }
}

fn int_json(int: i128) -> Value {
    match (i64::try_from(int), u64::try_from(int)) {
        (Ok(signed), _) => json!(signed),
        (_, Ok(unsigned)) => json!(unsigned),
        _ => Value::Null,
    }
}
