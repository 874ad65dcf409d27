import Foundation
import GRDBSQLite
import Persistence

// MARK: - Fetching
extension SQLiteStore {
    /// The records `request` selects, in its order.
    public func fetch(_ request: Persistence.FetchRequest) throws -> [Persistence.Record] {
        _ = try connection()
        try request.validate(in: schema)
        let table = layout.entities[request.entity]!
        let query = SQLTranslation.select(request, table)
        return try read { db, url in
            let statement = try RawStatement(db, sql: query.sql, url: url)
            defer { statement.finish() }
            try statement.bind(query.bindings)
            let decoder = RowDecoder(table)
            var records: [Record] = []
            if let limit = request.fetchLimit { records.reserveCapacity(min(limit, 10_000)) }
            while try statement.step("fetching records") {
                records.append(try statement.record(decoder))
            }
            return records
        }
    }

    /// How many records `request` selects (ignoring its limit and offset).
    public func count(for request: Persistence.FetchRequest) throws -> Int {
        _ = try connection()
        try request.validate(in: schema)
        let query = SQLTranslation.count(request, layout.entities[request.entity]!)
        return try read { db, url in
            let statement = try RawStatement(db, sql: query.sql, url: url)
            defer { statement.finish() }
            try statement.bind(query.bindings)
            guard try statement.step("counting records") else { return 0 }
            return Int(sqlite3_column_int64(statement.pointer, 0))
        }
    }

    /// The records with these ids that the store holds, in no particular order (ids of
    /// entities the schema lacks find nothing).
    public func records(with ids: [ObjectID]) throws -> [Persistence.Record] {
        _ = try connection()
        var byEntity: [String: [UUID]] = [:]
        for id in Set(ids) where layout.entities[id.entity] != nil { byEntity[id.entity, default: []].append(id.uuid) }
        if byEntity.isEmpty { return [] }
        return try read { db, url in
            var records: [Record] = []
            records.reserveCapacity(ids.count)
            for (entity, uuids) in byEntity.sorted(by: { $0.key < $1.key }) {
                let table = layout.entities[entity]!
                let decoder = RowDecoder(table)
                var start = 0
                while start < uuids.count {
                    let chunk = uuids[start..<min(start + 512, uuids.count)]
                    start += chunk.count
                    let sql =
                        "SELECT \(table.selectList) FROM \(table.quotedTable) WHERE id IN (\(PlaceholderList.text(for: chunk.count)))"
                    let statement = try RawStatement(db, sql: sql, url: url)
                    defer { statement.finish() }
                    try statement.bind(PlaceholderList.padded(chunk.map { .uuid($0) }))
                    while try statement.step("fetching records by id") { records.append(try statement.record(decoder)) }
                }
            }
            return records
        }
    }
}
