import Foundation
import Persistence

// The typed access to sync's metadata entries in the store: a key names an entry and says how
// its value is stored (``SyncMetadataCodec``); a prefix names a family of entries (one per
// device, log or record). Every key and prefix is a member of ``SyncMetadata``
// (SyncMetadata.swift), the one place that spells their names.

/// How a metadata entry stores its value: the bytes written, and the value read back (`nil`
/// for bytes that do not hold one).
package struct SyncMetadataCodec<Value>: Sendable {
    package let encode: @Sendable (Value) throws -> Data
    package let decode: @Sendable (Data) -> Value?

    package init(encode: @escaping @Sendable (Value) throws -> Data, decode: @escaping @Sendable (Data) -> Value?) {
        self.encode = encode
        self.decode = decode
    }
}

extension SyncMetadataCodec where Value == String {
    /// UTF-8 text, read back as `String(decoding:as:)` does (bytes that are not UTF-8 become
    /// U+FFFD).
    package static var text: Self {
        Self(encode: { Data($0.utf8) }, decode: { String(decoding: $0, as: UTF8.self) })
    }
}

extension SyncMetadataCodec where Value == UInt64 {
    /// A number in decimal, as UTF-8 text (`"42"`).
    package static var decimal: Self {
        Self(encode: { Data(String($0).utf8) }, decode: { UInt64(String(decoding: $0, as: UTF8.self)) })
    }
}

extension SyncMetadataCodec where Value == Double {
    /// A number as Swift prints a `Double` (`"1700000000.5"`), as UTF-8 text.
    package static var decimal: Self {
        Self(encode: { Data(String($0).utf8) }, decode: { Double(String(decoding: $0, as: UTF8.self)) })
    }
}

extension SyncMetadataCodec where Value == Data {
    /// The bytes as they are.
    package static var bytes: Self { Self(encode: { $0 }, decode: { $0 }) }
}

extension SyncMetadataCodec where Value == Void {
    /// A mark whose presence is what counts: written as `bytes` (UTF-8), read as present
    /// whatever it holds.
    package static func mark(_ bytes: String) -> Self {
        Self(encode: { _ in Data(bytes.utf8) }, decode: { _ in () })
    }
}

extension SyncMetadataCodec where Value == [String] {
    /// Lines of UTF-8 text joined with `"\n"`, read back without empty lines.
    package static var lines: Self {
        Self(
            encode: { Data($0.joined(separator: "\n").utf8) },
            decode: { String(decoding: $0, as: UTF8.self).split(separator: "\n").map(String.init) }
        )
    }
}

extension SyncMetadataCodec where Value: RawRepresentable & Sendable, Value.RawValue == String {
    /// The raw value as UTF-8 text.
    package static var rawText: Self {
        Self(encode: { Data($0.rawValue.utf8) }, decode: { Value(rawValue: String(decoding: $0, as: UTF8.self)) })
    }
}

extension SyncMetadataCodec where Value: Codable & Sendable {
    /// JSON as `JSONEncoder` writes it (keys sorted, with `sortedKeys`).
    package static func json(sortedKeys: Bool = false) -> Self {
        Self(
            encode: { value in
                let encoder = JSONEncoder()
                if sortedKeys { encoder.outputFormatting = [.sortedKeys] }
                return try encoder.encode(value)
            },
            decode: { try? JSONDecoder().decode(Value.self, from: $0) }
        )
    }
}

extension SyncMetadataCodec where Value == RecordClocks {
    /// A record's clocks: binary (``RecordClocks/encoded()``), read back from JSON too, as
    /// earlier versions kept them.
    package static var recordClocks: Self { Self(encode: { $0.encoded() }, decode: { try? RecordClocks.decode($0) }) }
}

/// One metadata entry of sync: its name in the store, and how its value is stored there.
package struct SyncMetadataKey<Value>: Sendable, SyncMetadataNamed {
    /// The entry's key in the store's metadata.
    package let name: String
    package let codec: SyncMetadataCodec<Value>

    package init(_ name: String, _ codec: SyncMetadataCodec<Value>) {
        self.name = name
        self.codec = codec
    }

    /// The bytes that store `value`.
    package func encode(_ value: Value) throws -> Data { try codec.encode(value) }

    /// The value `data` stores (`nil`: not one).
    package func decode(_ data: Data) -> Value? { codec.decode(data) }

    /// The same entry read and written as bytes (to copy or compare it exactly).
    package var raw: SyncMetadataKey<Data> { SyncMetadataKey<Data>(name, .bytes) }
}

/// Something that names a metadata entry (a ``SyncMetadataKey`` of any value): what a read of
/// several entries asks for.
package protocol SyncMetadataNamed: Sendable {
    var name: String { get }
}

/// A family of metadata entries of sync: a name prefix, followed by what tells them apart (a
/// device id, a log number, a record id).
package struct SyncMetadataPrefix<Value>: Sendable {
    /// What every name of the family begins with.
    package let prefix: String
    package let codec: SyncMetadataCodec<Value>

    package init(_ prefix: String, _ codec: SyncMetadataCodec<Value>) {
        self.prefix = prefix
        self.codec = codec
    }

    /// The entry of the family named `prefix` + `suffix`.
    package func callAsFunction(_ suffix: String) -> SyncMetadataKey<Value> {
        SyncMetadataKey(prefix + suffix, codec)
    }

    /// The entry of the family named after a record (`prefix` + `Entity/uuid`).
    package func callAsFunction(_ id: ObjectID) -> SyncMetadataKey<Value> {
        SyncMetadataKey(id.description(after: prefix), codec)
    }

    /// The entry of the family named `name` in full (one an enumeration of the family found).
    package func key(named name: String) -> SyncMetadataKey<Value> { SyncMetadataKey(name, codec) }

    /// What follows the prefix in `name`; `nil` for a name outside the family.
    package func suffix(of name: String) -> Substring? {
        name.hasPrefix(prefix) ? name.dropFirst(prefix.count) : nil
    }

    /// Whether `name` is of the family.
    package func contains(_ name: String) -> Bool { name.hasPrefix(prefix) }

    /// The part of the family whose names go on with `more`.
    package func narrowed(to more: String) -> SyncMetadataPrefix<Value> { SyncMetadataPrefix(prefix + more, codec) }

    /// The value `data` stores (`nil`: not one).
    package func decode(_ data: Data) -> Value? { codec.decode(data) }
}

/// One entry of a family, as an enumeration of the family hands it over.
package struct SyncMetadataEntry<Value> {
    /// The entry's name.
    package let name: String
    /// What follows the family's prefix in the name.
    package let suffix: Substring
    /// The bytes stored.
    package let data: Data
    let codec: SyncMetadataCodec<Value>

    /// The value stored (`nil`: the bytes hold none).
    package var value: Value? { codec.decode(data) }
    /// The entry's key.
    package var key: SyncMetadataKey<Value> { SyncMetadataKey(name, codec) }
}
