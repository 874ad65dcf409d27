import Foundation
import JSONStore
import Persistence
import PlistStore
import SyncTestKit

// The whole-file store archives: a JSON or property-list store file, as another process (or a
// sync engine carrying a data folder) left it.

extension FuzzTarget {
    /// A JSON store file: decoding throws only ``PersistenceError``s naming the file; what decodes
    /// encodes, and that encoding is stable (decoding it and encoding again gives the same bytes).
    static let jsonStore = FuzzTarget("json-store", "JSONFormat.decode: a JSON store file") {
        data,
        url throws(FuzzFinding) in
        try storeRoundTrip(JSONFormat.self, "json-store", data, url)
    }

    /// A property-list store file (binary or XML), with the same properties as ``jsonStore``.
    static let plistStore = FuzzTarget("plist-store", "PlistFormat.decode: a binary or XML property-list store file") {
        data,
        url throws(FuzzFinding) in
        try storeRoundTrip(PlistFormat.self, "plist-store", data, url)
    }

    private static func storeRoundTrip(
        _ store: any StoreFileFormat.Type,
        _ target: String,
        _ data: Data,
        _ url: URL
    ) throws(FuzzFinding) -> FuzzOutcome {
        let options = StoreOptions(presentsFiles: false)
        let snapshot: StoreSnapshot
        do {
            snapshot = try store.decode(data, url: url, options: options)
        } catch let error as PersistenceError {
            try check(error.url == url, target, "an error that does not name the file: \(error)")
            return .rejected(error, namedFile: url)
        } catch {
            throw FuzzFinding(target, "an error that is not a PersistenceError: \(type(of: error)) \(error)")
        }
        let encoded = try must(target, "encoding") { try store.encode(snapshot, options: options) }
        let again = try must(target, "decoding what was encoded") {
            try store.decode(encoded, url: url, options: options)
        }
        let reencoded = try must(target, "encoding again") { try store.encode(again, options: options) }
        try check(reencoded == encoded, target, "a decoded store's encoding is not stable")
        try check(
            again.records.count == snapshot.records.count && again.metadata.entries == snapshot.metadata.entries
                && again.schema == snapshot.schema,
            target,
            "a decoded store changes in a round trip"
        )
        return .decoded
    }
}

extension FuzzTarget {
    /// A whole-file store opened from a file (the first byte picks JSON, even, or plist, odd; the
    /// rest is the file), read-only, with the schema of the sync simulator: the file's schema is
    /// migrated to it, its records fetched. Refusals are ``PersistenceError``s naming the file.
    static let storeOpen = FuzzTarget(
        "store-open",
        "WholeFileStore.init: a JSON or plist store file opened and migrated"
    ) { data, url throws(FuzzFinding) in
        guard let first = data.first else { return .rejected(FuzzInputTooShort(), namedFile: nil) }
        let isJSON = first % 2 == 0
        let fileURL = FuzzScratch.shared.root.appendingPathComponent(isJSON ? "store.json" : "store.plist")
        do {
            try FileManager.default.createDirectory(
                at: fileURL.deletingLastPathComponent(),
                withIntermediateDirectories: true
            )
            try Data(data.dropFirst()).write(to: fileURL)
        } catch {
            throw FuzzFinding("store-open", "cannot write the scratch store \(fileURL.path): \(error)")
        }
        defer { try? FileManager.default.removeItem(at: fileURL) }
        let store: any PersistentStore
        do {
            let options = StoreOptions(isReadOnly: true, presentsFiles: false)
            store =
                isJSON
                ? try JSONStore(url: fileURL, schema: SyncSimulator.schema, options: options)
                : try PlistStore(url: fileURL, schema: SyncSimulator.schema, options: options)
        } catch let error as PersistenceError {
            try check(
                error.url?.lastPathComponent == fileURL.lastPathComponent,
                "store-open",
                "an error that does not name the file: \(error)"
            )
            return .rejected(error, namedFile: fileURL)
        } catch {
            throw FuzzFinding("store-open", "an error that is not a PersistenceError: \(type(of: error)) \(error)")
        }
        defer { store.close() }
        var count = 0
        for entity in SyncSimulator.schema.entities {
            count += try must("store-open", "fetching \(entity.name)") {
                try store.fetch(FetchRequest(entity: entity.name)).count
            }
        }
        let metadata = try must("store-open", "reading the metadata") { try store.metadata() }
        try check(
            metadata.schemaVersion == SyncSimulator.schema.version,
            "store-open",
            "a store opened under schema \(SyncSimulator.schema.version) says \(metadata.schemaVersion)"
        )
        _ = count
        return .decoded
    }
}
