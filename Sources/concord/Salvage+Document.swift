import Foundation
import JSONStore
import Persistence

extension Salvage {
    /// Reads a whole-file store's document record by record, through the plugin's own decoder:
    /// each entity's records are decoded together, and one by one when that fails, so only
    /// the records that do not decode are lost (and named). A JSON document cut short is closed
    /// after its last complete record first.
    enum Document {
        static func salvage(
            _ url: URL,
            named original: URL,
            type: any AnyWholeFileStore.Type,
            schema: Schema,
            report: inout SalvageReport
        ) throws -> (records: [Record], entries: [String: Data]) {
            let name = type.storeType
            let data: Data
            do { data = try Data(contentsOf: url) } catch {
                throw ToolError("cannot read the file: \(error.localizedDescription)", url: original)
            }
            var tree = ArchiveTree.parse(data, type: name)
            var cutShort = false
            if tree == nil, name == JSONStore.storeType, let closed = closeTruncatedJSON(data) {
                tree = ArchiveTree.parse(closed, type: name)
                cutShort = tree != nil
                if cutShort {
                    report.notes.append("the JSON document is cut short: read up to its last complete record")
                }
            }
            guard let tree else {
                throw ToolError(
                    "the document does not parse as \(name == JSONStore.storeType ? "JSON" : "a property list"): no "
                        + "record can be read",
                    url: original
                )
            }
            let schemaTree = try encodedTree(schema, type: name)
            func decode(metadata: [String: Any]?, records: [String: Any]) throws -> StoreSnapshot {
                let document: [String: Any] = [
                    "format": StoreArchive.formatMarker, "formatVersion": StoreArchive.formatVersion,
                    "metadata": metadata ?? [
                        "storeIdentifier": StoreMetadata.makeIdentifier().uuidString.lowercased(),
                        "schemaVersion": schema.version,
                        "entries": [String: Any](),
                    ],
                    "schema": schemaTree, "records": records,
                ]
                return try type.decode(
                    try ArchiveTree.serialize(document, type: name),
                    url: url,
                    options: StoreOptions()
                )
            }
            var entries: [String: Data] = [:]
            if var metadata = tree["metadata"] as? [String: Any] {
                metadata["schemaVersion"] = schema.version
                if let snapshot = try? decode(metadata: metadata, records: [:]) {
                    entries = snapshot.metadata.entries
                } else {
                    report.notes.append("the document's metadata does not decode; none is copied")
                }
            } else {
                report.notes.append("the document has no readable metadata; none is copied")
            }
            let groups = tree["records"] as? [String: Any] ?? [:]
            var records: [Record] = []
            for entity in schema.entities {
                guard let value = groups[entity.name] else {
                    report.skipped.append(
                        SalvageReport.Skipped(
                            entity: entity.name,
                            reason: cutShort
                                ? "the document ends before the records of \(entity.name)"
                                : "the document has no records of \(entity.name)"
                        )
                    )
                    continue
                }
                guard let list = value as? [Any] else {
                    report.skipped.append(
                        SalvageReport.Skipped(
                            entity: entity.name,
                            reason: "the records of \(entity.name) are not a list"
                        )
                    )
                    continue
                }
                report.expected[entity.name] = list.count
                var found: [Record] = []
                if let snapshot = try? decode(metadata: nil, records: [entity.name: list]) {
                    found = Array(snapshot.records.values)
                } else {
                    for (index, item) in list.enumerated() {
                        do {
                            found += try decode(metadata: nil, records: [entity.name: [item]]).records.values
                        } catch {
                            let id = (item as? [String: Any])?[StoreArchive.idKey] as? String
                            report.skipped.append(
                                SalvageReport.Skipped(
                                    entity: entity.name,
                                    id: id ?? "record \(index)",
                                    reason: "\(error)"
                                )
                            )
                        }
                    }
                }
                report.recovered[entity.name] = found.count
                records += found.sorted { $0.id < $1.id }
            }
            // Entities are written in name order: the document ends inside the last one present.
            if cutShort, let last = groups.keys.max(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
                report.skipped.append(
                    SalvageReport.Skipped(
                        entity: last,
                        reason:
                            "the document ends inside the records of \(last): those after the last complete one are "
                            + "lost"
                    )
                )
            }
            return (records, entries)
        }

        /// `value` encoded in the document's syntax and parsed back into a tree.
        static func encodedTree<T: Encodable>(_ value: T, type: String) throws -> Any {
            if type == JSONStore.storeType {
                return try JSONSerialization.jsonObject(with: try JSONEncoder().encode(value))
            }
            let encoder = PropertyListEncoder()
            encoder.outputFormat = .binary
            return try PropertyListSerialization.propertyList(from: try encoder.encode(value), options: [], format: nil)
        }

        /// A JSON document cut short, closed after the last value that ends at most three levels
        /// deep (the document, `records`, an entity's list: so after a whole record, never inside
        /// one). `nil` when there is no such place.
        static func closeTruncatedJSON(_ data: Data) -> Data? {
            var stack: [UInt8] = []
            var inString = false
            var escaped = false
            var cut: (offset: Int, stack: [UInt8])?
            for (offset, byte) in data.enumerated() {
                if inString {
                    if escaped {
                        escaped = false
                    } else if byte == UInt8(ascii: "\\") {
                        escaped = true
                    } else if byte == UInt8(ascii: "\"") {
                        inString = false
                    }
                    continue
                }
                switch byte {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): stack.append(byte)
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    guard !stack.isEmpty else { return nil }
                    stack.removeLast()
                    if !stack.isEmpty && stack.count <= 3 { cut = (offset + 1, stack) }
                default: break
                }
            }
            guard let cut else { return nil }
            var closed = Data(data.prefix(cut.offset))
            for opener in cut.stack.reversed() {
                closed.append(opener == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]"))
            }
            return closed
        }
    }
}
