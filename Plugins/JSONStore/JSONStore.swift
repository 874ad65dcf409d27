// JSONStore: a Concord store kept as one UTF-8 JSON file, read whole and replaced whole.
//
// This file is also a template: it uses only the public API of Persistence, so you can copy it
// to write a store plugin of your own as a `StoreFileFormat` for `WholeFileStore` (a format is
// two functions and a name; leaving one out does not compile).
//
// File format, version 1 (keys are written sorted, so equal contents give equal bytes):
//
//     {
//       "format": "concord.store",
//       "formatVersion": 1,
//       "metadata": {
//         "entries": { "<key>": "<base64>", ... },
//         "schemaVersion": 3,
//         "storeIdentifier": "<lowercase uuid>"
//       },
//       "records": {
//         "<Entity>": [
//           { "@id": "<lowercase uuid>", "<attribute>": <value>, "<to-one>": "<uuid>",
//             "<to-many>": ["<uuid>", ...] },
//           ...
//         ],
//         ...
//       },
//       "schema": { "version": 3, "entities": [ ... ] }
//     }
//
// - `schema` is `Schema`'s Codable form; it is validated again when read.
// - `records` has one array per entity of the schema (empty ones included), each sorted by id
//   (the order of `ObjectID`: the UUID's bytes, which is also the order of the lowercase hex).
//   A record's id is its `"@id"` (so an attribute may be called `"id"`; `"@id"` is reserved).
// - Property values are typed by the schema, so they carry no type tags: string → string;
//   integer → integer (all of Int64, exactly); double → number in the shortest form that
//   reads back to the same bits (`1.0` is written `1`, `-0.0` is `-0`), and NaN, +∞, −∞, which
//   JSON cannot hold, as the strings `"NaN"`, `"Infinity"`, `"-Infinity"` (a NaN's payload
//   and sign are not kept); boolean → `true`/`false`; date → its `timeIntervalSinceReferenceDate`
//   as a number (round-trips exactly); data → base64; uuid → lowercase string; to-one → the
//   target's UUID; to-many → the targets' UUIDs, sorted; `null` and empty relationships →
//   the key is absent (an explicit JSON `null` reads as absent too).
//
// The layout, the order of everything in it and the checks made when reading are
// `StoreArchive`'s (in Persistence, shared with the plist plugin); this file chooses the JSON
// encoder's strategies (sorted keys, dates as numbers, data as base64, non-finite doubles as
// strings) and the wording of the errors that name JSON.
//
// Reading never trusts the file: anything that is not JSON (garbage, a truncated file, an empty
// file) is `PersistenceError.Code.corruptStore`; JSON without the `"format": "concord.store"`
// marker, or a property list, is `.notAStore`; a value of the wrong type, an id that is not a
// UUID, a duplicate id, a record of an entity or a property the file's schema lacks, or an
// invalid schema is `.corruptStore` naming the entity, the property and the id. JSON nested
// deeper than the parser's limit (512) is rejected by the parser, never by a crash.
import Foundation
import Persistence

/// A store kept as one JSON file that is read whole and replaced whole, registered as `"json"`.
///
/// It promises everything `WholeFileStore` promises (atomic, durable commits that re-read
/// other writers' changes first; presenting its file; following moves; tearing down on
/// deletion), and a file format that is deterministic (the same contents give the same bytes),
/// human-readable, and round-trips every value exactly (see ``JSONFormat``). Its files open
/// only as JSON stores: any other file fails with a `PersistenceError` that names it.
public typealias JSONStore = WholeFileStore<JSONFormat>

/// The JSON store's file format (see the header of this file): UTF-8 JSON, format version 1.
public enum JSONFormat: StoreFileFormat {
    /// `"json"`.
    public static var storeType: String { "json" }

    /// The file's bytes for `snapshot`: UTF-8 JSON in format version 1, keys sorted.
    public static func encode(_ snapshot: StoreSnapshot, options: StoreOptions) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.nonConformingFloatEncodingStrategy = .convertToString(
            positiveInfinity: "Infinity",
            negativeInfinity: "-Infinity",
            nan: "NaN"
        )
        encoder.dateEncodingStrategy = .deferredToDate
        encoder.dataEncodingStrategy = .base64
        do {
            return try encoder.encode(StoreArchive(snapshot: snapshot))
        } catch let error as PersistenceError {
            throw error
        } catch {
            throw PersistenceError(.invalidRequest, "cannot encode the store as JSON: \(error)", underlying: error)
        }
    }

    /// The snapshot `data` holds; throws `PersistenceError` naming `url` (`PersistenceError.Code.corruptStore`
    /// or `PersistenceError.Code.notAStore`) for anything that is not a JSON store of format
    /// version 1.
    public static func decode(_ data: Data, url: URL, options: StoreOptions) throws -> StoreSnapshot {
        if let kind = propertyListKind(of: data) {
            throw PersistenceError(.notAStore, "the file is a \(kind) property list, not a JSON store", url: url)
        }
        let decoder = JSONDecoder()
        decoder.nonConformingFloatDecodingStrategy = .convertFromString(
            positiveInfinity: "Infinity",
            negativeInfinity: "-Infinity",
            nan: "NaN"
        )
        decoder.dateDecodingStrategy = .deferredToDate
        decoder.dataDecodingStrategy = .base64
        decoder.userInfo[StoreArchive.wordingKey] = jsonWording
        do {
            return try decoder.decode(StoreArchive.self, from: data).snapshot
        } catch var error as PersistenceError {
            error.url = url
            throw error
        } catch let error as DecodingError {
            throw PersistenceError(.corruptStore, jsonWording.describe(error), url: url, underlying: error)
        } catch {
            throw PersistenceError(
                .corruptStore,
                "the file cannot be read as JSON: \(error)",
                url: url,
                underlying: error
            )
        }
    }
}

// MARK: - The file format

/// The messages of ``StoreArchive`` that name JSON.
private let jsonWording = StoreArchive.Wording(
    rootNotKeyed: "the file is JSON but not an object, so not a Concord store",
    withoutMarker:
        "the file is JSON without the \"format\": \"\(StoreArchive.formatMarker)\" marker, so not a Concord store",
    unparsable: "the file is not valid JSON (damaged, truncated or empty)"
)

/// "binary" or "XML" when `data` starts like a property list.
private func propertyListKind(of data: Data) -> String? {
    let head = data.prefix(64)
    if head.starts(with: Array("bplist".utf8)) { return "binary" }
    var text = Substring(decoding: head, as: UTF8.self)
    if text.hasPrefix("\u{FEFF}") { text = text.dropFirst() }
    text = text.drop { $0.isWhitespace }
    if text.hasPrefix("<?xml") || text.hasPrefix("<plist") || text.hasPrefix("<!DOCTYPE plist") { return "XML" }
    return nil
}
