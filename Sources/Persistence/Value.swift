import Foundation

/// The type of an attribute.
public enum AttributeType: String, Sendable, Hashable, Codable, CaseIterable {
    /// Text; 64-bit integers; doubles; booleans; dates; bytes; UUIDs.
    case string, integer, double, boolean, date, data, uuid
}

/// One attribute value, as stores keep it.
public enum Value: Sendable, Hashable, Codable, CustomStringConvertible {
    /// No value.
    case null
    /// Text.
    case string(String)
    /// A 64-bit integer.
    case integer(Int64)
    /// A double.
    case double(Double)
    /// A boolean.
    case boolean(Bool)
    /// A point in time, kept to the nanosecond as seconds since 1970.
    case date(Date)
    /// Bytes.
    case data(Data)
    /// A UUID.
    case uuid(UUID)

    /// The attribute type this value has, or `nil` for ``null``.
    public var type: AttributeType? {
        switch self {
        case .null: return nil
        case .string: return .string
        case .integer: return .integer
        case .double: return .double
        case .boolean: return .boolean
        case .date: return .date
        case .data: return .data
        case .uuid: return .uuid
        }
    }

    /// The value for logs and error messages.
    public var description: String {
        switch self {
        case .null: return "null"
        case .string(let value): return "\"\(value)\""
        case .integer(let value): return String(value)
        case .double(let value): return String(value)
        case .boolean(let value): return String(value)
        case .date(let value): return "date(\(value.timeIntervalSince1970))"
        case .data(let value): return "data(\(value.count) bytes)"
        case .uuid(let value): return value.lowercaseText
        }
    }
}
